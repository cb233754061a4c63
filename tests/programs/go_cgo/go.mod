module go_cgo

go 1.19
