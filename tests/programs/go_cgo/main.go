// go_cgo: a Go program linked with cgo (so it loads the preload), with a
// known CPU split: heavy() does three times the work of light(). Tests
// check that its functions are named with their own Go files and lines
// (libdw alone placed them in runtime/cgo/gcc_mmap.c) and that the split
// and the sample count match the CPU the process really used, and that
// frameless leaves keep their caller.
//
//	go_cgo [rounds [cexit]]   cexit: end through libc's exit(), not Go's
//	                          exit_group, so the recorder seals the trace
package main

/*
#include <stdlib.h>
int cgo_twice(int x) { return 2 * x; }
*/
import "C"

import (
	"fmt"
	"os"
	"strconv"
)

// Both are frameless Go leaves (no frame pointer pushed): their caller
// must still show (preload/stacks/stack_unwinder.cc, ReturnAddressAtSp).
//
//go:noinline
func heavy(n int) int {
	s := 0
	for i := 0; i < 3*n; i++ {
		s += i * i % 7
	}
	return s
}

//go:noinline
func light(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i % 5
	}
	return s
}

func main() {
	rounds := 40
	if len(os.Args) > 1 {
		rounds, _ = strconv.Atoi(os.Args[1])
	}
	s := 0
	for i := 0; i < rounds; i++ {
		s += heavy(3000000) + light(3000000)
	}
	fmt.Println(int(C.cgo_twice(3)), s)
	if len(os.Args) > 2 && os.Args[2] == "cexit" {
		C.exit(0)
	}
}
