// InternTables: per-segment interning of strings, mappings, locations, stacks.
#include "format/intern_tables.h"

#include <bit>

#include <atomic>
#include <cstring>

#include "format/varint.h"

namespace flightrec::format {

InternTables::InternTables() = default;
InternTables::~InternTables() = default;

MiVector<uint8_t>* InternTables::Table::BeginEntry(uint32_t* id) {
  if (pending.empty() || pending.back().bytes.size() >= kTableChunkBytes) {
    pending.emplace_back();
    pending.back().first_id = next_id;
  }
  Chunk& c = pending.back();
  c.count++;
  *id = next_id++;
  return &c.bytes;
}

namespace {
// Epochs are unique in the process, not per table: a cache of ids kept
// outside the writer (SocketFlushSide's op names) may outlive the writer it
// asked, and a new writer counting from 1 again would make its stale ids look
// current (a privilege drop restarts the flush thread with a new writer).
std::atomic<uint64_t> g_next_epoch{1};
}  // namespace

uint64_t InternTables::NewEpoch() { return g_next_epoch.fetch_add(1, std::memory_order_relaxed); }

void InternTables::Reset() {
  epoch_ = NewEpoch();  // every RecentStrings entry refers to ids cleared below
  strings_.Clear();
  mappings_.Clear();
  locations_.Clear();
  stacks_.Clear();
  // Swap with empty maps rather than clear(): clear() keeps the bucket array,
  // and the point of Reset is to give the memory back.
  decltype(string_ids_)().swap(string_ids_);
  decltype(mapping_ids_)().swap(mapping_ids_);
  ForgetPcs();
}

void InternTables::ForgetPcs() {
  decltype(location_ids_)().swap(location_ids_);
  decltype(provisional_locations_)().swap(provisional_locations_);
  decltype(stack_ids_)().swap(stack_ids_);
  decltype(provisional_stacks_)().swap(provisional_stacks_);
  decltype(before_location_ids_)().swap(before_location_ids_);
  decltype(before_stack_ids_)().swap(before_stack_ids_);
}

void InternTables::NewWorld(uint64_t start) {
  world_start_ = start;
  ForgetPcs();  // (ids handed out stay valid: their table entries are written)
}

size_t InternTables::pending_bytes() const {
  size_t n = 0;
  for (const Table* t : {&strings_, &mappings_, &locations_, &stacks_})
    for (const Chunk& c : t->pending) n += c.bytes.size();
  return n;
}

uint32_t InternTables::String(std::string_view s) {
  if (s.empty()) return 0;
  if (s.size() > kMaxValueBytes) {
    size_t n = kMaxValueBytes;
    // Do not split a UTF-8 sequence: back off over continuation bytes.
    while (n > 0 && (static_cast<uint8_t>(s[n]) & 0xC0) == 0x80) n--;
    s = s.substr(0, n);
  }
  auto it = string_ids_.find(s);
  if (it != string_ids_.end()) return it->second;
  uint32_t id;
  PutStr(strings_.BeginEntry(&id), s);
  string_ids_.emplace(MiString(s), id);
  return id;
}

size_t InternTables::MappingKeyHash::operator()(const MappingKey& k) const {
  uint64_t h = k.start * 0x9E3779B97F4A7C15ull;
  h ^= (k.end + (h << 6) + (h >> 2));
  h ^= (k.offset + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  h ^= ((static_cast<uint64_t>(k.path) << 32 | k.build_id) + (h << 6) + (h >> 2));
  return static_cast<size_t>(h);
}

uint32_t InternTables::Mapping(const MappingInfo& m) {
  MappingKey key{m.start, m.end, m.file_offset, String(m.path), String(m.build_id)};
  auto it = mapping_ids_.find(key);
  if (it != mapping_ids_.end()) return it->second;
  uint32_t id;
  MiVector<uint8_t>* e = mappings_.BeginEntry(&id);
  PutUvarint(e, key.start);
  PutUvarint(e, key.end);
  PutUvarint(e, key.offset);
  PutUvarint(e, key.path);
  PutUvarint(e, key.build_id);
  mapping_ids_.emplace(key, id);
  return id;
}

bool InternTables::Describe(uint64_t pc, uint64_t era) {
  described_ = true;
  uint32_t mapping_id = 0;
  bool named = false;
  scratch_ids_.clear();  // (function, file, line) per inline frame
  scratch_lines_.clear();
  scratch_mapping_ = MappingInfo{};
  if (describer_ && (era != kNowEra ? describer_->DescribeBefore(pc, era, &scratch_mapping_, &scratch_lines_)
                                    : describer_->Describe(pc, &scratch_mapping_, &scratch_lines_))) {
    // A describer may name a pc that is in no mapping (a marker): id 0.
    const MappingInfo& m = scratch_mapping_;
    if (m.start || m.end || !m.path.empty()) mapping_id = Mapping(m);
    for (const FrameLine& l : scratch_lines_) {
      named |= !l.function.empty();
      scratch_ids_.push_back(String(l.function));
      scratch_ids_.push_back(String(l.file));
      scratch_ids_.push_back(l.line);
    }
  }
  // Encoded only after the strings/mapping above were interned: they append
  // to other tables' chunks, never to LOCATIONS.
  scratch_entry_.clear();
  PutUvarint(&scratch_entry_, mapping_id);
  PutUvarint(&scratch_entry_, pc);
  PutUvarint(&scratch_entry_, scratch_ids_.size() / 3);
  for (uint32_t v : scratch_ids_) PutUvarint(&scratch_entry_, v);
  return named;
}

uint32_t InternTables::Location(uint64_t pc, uint64_t generation, bool* provisional) {
  auto it = location_ids_.find(pc);
  if (it != location_ids_.end()) {
    *provisional = it->second.provisional;
    if (!it->second.provisional) return it->second.id;
    auto p = provisional_locations_.find(pc);
    if (p->second.generation == generation) return it->second.id;
    // The describer may know more now: ask again, keep the id if it does not.
    const bool named = Describe(pc);
    p->second.generation = generation;
    if (scratch_entry_ == p->second.entry) return it->second.id;
    uint32_t id;
    MiVector<uint8_t>* e = locations_.BeginEntry(&id);
    e->insert(e->end(), scratch_entry_.begin(), scratch_entry_.end());
    it->second = LocationRef{id, !named};
    if (named) provisional_locations_.erase(p);
    else p->second.entry = scratch_entry_;
    *provisional = !named;
    return id;
  }
  const bool named = Describe(pc);
  uint32_t id;
  MiVector<uint8_t>* e = locations_.BeginEntry(&id);
  e->insert(e->end(), scratch_entry_.begin(), scratch_entry_.end());
  location_ids_.emplace(pc, LocationRef{id, !named});
  if (!named) provisional_locations_.emplace(pc, ProvisionalLocation{generation, scratch_entry_});
  *provisional = !named;
  return id;
}

// Every cpu.sample's stack is hashed (issue #39: ~27 pcs a sample): four
// independent lanes, so the multiplies overlap instead of each waiting for
// the one before (a third of the time of one serial chain). Only where a
// stack sits in the table depends on it, never an id or a byte written.
size_t InternTables::StackHash::operator()(PcSpan s) const {
  constexpr uint64_t kMul = 0xff51afd7ed558ccdull;
  uint64_t a = s.n * 0x9E3779B97F4A7C15ull, b = 0xC2B2AE3D27D4EB4Full, c = 0x165667B19E3779F9ull,
           d = 0x27D4EB2F165667C5ull;
  size_t i = 0;
  for (; i + 4 <= s.n; i += 4) {
    a = (a ^ s.p[i]) * kMul;
    b = (b ^ s.p[i + 1]) * kMul;
    c = (c ^ s.p[i + 2]) * kMul;
    d = (d ^ s.p[i + 3]) * kMul;
    a ^= a >> 32;
    b ^= b >> 32;
    c ^= c >> 32;
    d ^= d >> 32;
  }
  for (; i < s.n; i++) {
    a = (a ^ s.p[i]) * kMul;
    a ^= a >> 32;
  }
  uint64_t h = a ^ std::rotl(b, 16) ^ std::rotl(c, 32) ^ std::rotl(d, 48);
  h *= kMul;
  h ^= h >> 32;
  return static_cast<size_t>(h);
}

bool InternTables::StackEq::Same(PcSpan a, PcSpan b) {
  return a.n == b.n && (a.n == 0 || std::memcmp(a.p, b.p, a.n * sizeof(uint64_t)) == 0);
}

uint32_t InternTables::NewStack(const MiVector<uint32_t>& loc_ids) {
  uint32_t id;
  MiVector<uint8_t>* e = stacks_.BeginEntry(&id);
  PutUvarint(e, loc_ids.size());
  for (uint32_t l : loc_ids) PutUvarint(e, l);
  return id;
}

uint32_t InternTables::Stack(const uint64_t* pcs, uint32_t npcs, uint64_t time_ns) {
  if (npcs == 0 || pcs == nullptr) return 0;
  size_t n = npcs > kMaxStackFrames ? kMaxStackFrames : npcs;
  if (!describer_) return StackNow(pcs, n);
  // The world is asked again after any pc was described: a library unloaded
  // while a stack was being described may have left its addresses to the
  // next one loaded before the describer looked at them (it reads the maps
  // afresh for a pc it does not know), and then the answer names the
  // newcomer. If the world moved, what was described is forgotten
  // (NewWorld) and the stack described again, as of its era. Bounded: a host
  // that unloads faster than a stack is described keeps the last answer.
  uint32_t id = 0;
  for (int attempt = 0; attempt < kWorldAttempts; attempt++) {
    const uint64_t start = describer_->WorldStart();
    if (start != world_start_) NewWorld(start);
    described_ = false;
    id = time_ns && time_ns < start ? StackBefore(pcs, n, describer_->EraBefore(time_ns)) : StackNow(pcs, n);
    if (!described_ || describer_->WorldStart() == start) break;
  }
  return id;
}

uint32_t InternTables::StackNow(const uint64_t* pcs, size_t n) {
  PcSpan key{pcs, n};
  auto it = stack_ids_.find(key);
  if (it != stack_ids_.end()) return it->second.provisional ? Recheck(&it->second, it->first) : it->second.id;
  const uint64_t generation = Generation();
  MiVector<uint32_t> loc_ids;  // not scratch_ids_: Location() uses that
  loc_ids.reserve(n);
  bool provisional = false;
  for (size_t i = 0; i < n; i++) {
    bool p;
    loc_ids.push_back(Location(pcs[i], generation, &p));
    provisional |= p;
  }
  const uint32_t id = NewStack(loc_ids);
  stack_ids_.emplace(MiVector<uint64_t>(pcs, pcs + n), StackRef{id, provisional});
  if (provisional) provisional_stacks_.emplace(id, ProvisionalStack{generation, std::move(loc_ids)});
  return id;
}

// Described once, final: what was there then will not be known better later.
uint32_t InternTables::StackBefore(const uint64_t* pcs, size_t n, uint64_t era) {
  before_key_.assign(1, era);
  before_key_.insert(before_key_.end(), pcs, pcs + n);
  auto it = before_stack_ids_.find(PcSpan{before_key_.data(), before_key_.size()});
  if (it != before_stack_ids_.end()) return it->second;
  MiVector<uint32_t> loc_ids;
  loc_ids.reserve(n);
  for (size_t i = 0; i < n; i++) {
    auto l = before_location_ids_.find(PcEra{pcs[i], era});
    if (l == before_location_ids_.end()) {
      Describe(pcs[i], era);
      uint32_t id;
      MiVector<uint8_t>* e = locations_.BeginEntry(&id);
      e->insert(e->end(), scratch_entry_.begin(), scratch_entry_.end());
      l = before_location_ids_.emplace(PcEra{pcs[i], era}, id).first;
    }
    loc_ids.push_back(l->second);
  }
  const uint32_t id = NewStack(loc_ids);
  before_stack_ids_.emplace(before_key_, id);
  return id;
}

uint32_t InternTables::Recheck(StackRef* ref, const MiVector<uint64_t>& pcs) {
  const uint64_t generation = Generation();
  auto ps = provisional_stacks_.find(ref->id);
  if (ps->second.generation == generation) return ref->id;
  MiVector<uint32_t> loc_ids;
  loc_ids.reserve(pcs.size());
  bool provisional = false;
  for (uint64_t pc : pcs) {
    bool p;
    loc_ids.push_back(Location(pc, generation, &p));
    provisional |= p;
  }
  if (loc_ids != ps->second.locations) ref->id = NewStack(loc_ids);
  provisional_stacks_.erase(ps);
  ref->provisional = provisional;
  if (provisional) provisional_stacks_.emplace(ref->id, ProvisionalStack{generation, std::move(loc_ids)});
  return ref->id;
}

}  // namespace flightrec::format
