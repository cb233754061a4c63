// UnloadedCode: see unloaded_code.h.
#include "sampler/symbols/unloaded_code.h"

#include <algorithm>

#include "sampler/symbols/module_elf.h"

namespace flightrec::sampler {

namespace {
int NoSeparateDebuginfo(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char*, const char*, GElf_Word, char**) {
  return -1;
}
char* const kNoDebuginfoPath = nullptr;
const Dwfl_Callbacks kCallbacks = {FindElfOwned, NoSeparateDebuginfo, nullptr, const_cast<char**>(&kNoDebuginfoPath)};
}  // namespace

UnloadedCode::~UnloadedCode() {
  for (Record& r : records_) Close(&r);
}

void UnloadedCode::Close(Record* r) {
  if (r->dwfl) dwfl_end(r->dwfl);
  r->dwfl = nullptr;
  r->mod = nullptr;
}

size_t UnloadedCode::Sync(uint64_t* latest_ns) {
  const uint64_t count = CodeUnloadCount();
  size_t taken = 0;
  while (next_ < count) {
    Record r;
    bool lost = false;
    if (!ReadCodeUnload(next_, &r.obj, &lost)) {
      if (!lost) break;  // still being written: next time
      // Overwritten before we read it: the eras up to it lack a record. The
      // history starts again after it (records_[i] is unload first_ + i).
      for (Record& o : records_) Close(&o);
      records_.clear();
      open_ = 0;
      next_++;
      first_ = complete_from_ = next_;
      continue;
    }
    if (records_.size() == kHistory) {
      if (records_.front().dwfl) open_--;
      Close(&records_.front());
      records_.erase(records_.begin());
      first_++;
      complete_from_ = std::max(complete_from_, first_);
    }
    if (records_.empty()) first_ = next_;
    *latest_ns = std::max(*latest_ns, r.obj.time_ns);
    records_.push_back(r);
    next_++;
    taken++;
  }
  return taken;
}

uint64_t UnloadedCode::EraOf(uint64_t time_ns) const {
  // (Racing dlcloses may publish a few microseconds out of order: the first
  // record after time_ns in publication order is the era's start.)
  for (size_t i = 0; i < records_.size(); i++)
    if (records_[i].obj.time_ns > time_ns) return first_ + i;
  return next_;
}

bool UnloadedCode::Complete(uint64_t era) const { return era >= complete_from_ && (era >= first_ || era == next_); }

Dwfl_Module* UnloadedCode::Open(Record* r) {
  if (r->tried) return r->mod;
  r->tried = true;
  if (open_ == kOpen) {  // close the oldest open one; it can be opened again
    for (Record& o : records_)
      if (o.dwfl) {
        Close(&o);
        o.tried = false;
        open_--;
        break;
      }
  }
  r->dwfl = dwfl_begin(&kCallbacks);
  if (!r->dwfl) return nullptr;
  open_++;
  dwfl_report_begin(r->dwfl);
  r->mod = dwfl_report_module(r->dwfl, r->obj.path, r->obj.lo, r->obj.hi);
  dwfl_report_end(r->dwfl, nullptr, nullptr);
  Dwarf_Addr bias = 0;
  if (r->mod && !dwfl_module_getelf(r->mod, &bias)) r->mod = nullptr;  // the file is gone or unreadable
  return r->mod;
}

const UnloadedObject* UnloadedCode::Holder(uint64_t era, uint64_t pc, Dwfl_Module** mod) {
  *mod = nullptr;
  const size_t from = era > first_ ? static_cast<size_t>(era - first_) : 0;
  for (size_t i = from; i < records_.size(); i++) {
    Record& r = records_[i];
    if (pc < r.obj.lo || pc >= r.obj.hi) continue;
    *mod = Open(&r);
    return &r.obj;
  }
  return nullptr;
}

}  // namespace flightrec::sampler
