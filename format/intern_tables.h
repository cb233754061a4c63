// InternTables: the writer's per-segment STRINGS, MAPPINGS, LOCATIONS and
// STACKS tables (SPEC.md 5.2). Interning returns a dense id (from 1; 0 =
// none) and, for a new value, appends its encoded entry to a pending chunk;
// EmitPending() hands the chunks out as table payloads in dependency order
// (strings, mappings, locations, stacks) and forgets them.
//
// Provisional locations: a pc the describer could not name (no mapping, or
// no function: its module's file could not be opened while the host held
// every descriptor) is interned as it was described, and remembered. Once
// PcDescriber::Generation() has changed, the next stack that uses the pc
// asks again; an answer that differs is interned as a NEW location id and
// recorded for the pc, and a stack that referred to the old id is interned
// afresh (new stack id) with the new one. Old ids stay valid, so events
// already appended keep the description they had; every event appended
// afterwards gets the better one. A pc may therefore have several
// LOCATIONS entries in a segment (SPEC.md 5.2). Named locations are final and
// never described twice; a stack with only named locations costs one hash
// lookup as before.
//
// Worlds: when the describer's WorldStart() moves (the host unloaded a
// library, so an address may now hold other code), every pc and stack is
// described afresh under new ids; ids handed out before stay valid. A stack
// of an event older than WorldStart() is described by DescribeBefore and
// cached apart from the current world's. The world is asked again after a
// stack was described: if it moved meanwhile, the answers may name code
// loaded after the event, and the stack is described again (Stack()).
//
// Memory: everything here comes from mimalloc and lives for one segment;
// Reset() (at every Open/Seal) drops it all, so a long-running process keeps
// at most one segment's worth of intern state.
//
// RecentStrings: a field's last few short strings and their ids, checked
// before the hash lookup. Enum-like values (socket.op's "op", request's
// "role") repeat on every event, and comparing a few short byte strings is
// cheaper than hashing one. Entries are copies (callers reuse buffers) and
// are tagged with the tables' epoch: string ids only ever die at Reset(),
// which starts a new epoch.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "format/format_constants.h"
#include "format/mi_containers.h"
#include "format/segment_writer.h"
#include "format/varint.h"

namespace flightrec::format {

inline constexpr size_t kMaxValueBytes = 64 * 1024;   // longer strings/bytes are truncated
inline constexpr size_t kMaxStackFrames = 1024;       // deeper stacks keep their leaf end
inline constexpr size_t kTableChunkBytes = 1u << 20;  // one table block stays near this size

// One field's cache (see above). Serves a single InternTables.
struct RecentStrings {
  static constexpr uint32_t kEntries = 4;
  static constexpr size_t kMaxBytes = 27;  // longer strings go straight to the hash
  struct Entry {
    uint32_t id;
    uint8_t len;
    char bytes[kMaxBytes];
  };
  uint64_t epoch = 0;  // InternTables epochs start at 1: a new cache is empty
  uint32_t used = 0, next = 0;
  Entry entries[kEntries];
};

class InternTables {
 public:
  InternTables();
  ~InternTables();

  void SetPcDescriber(PcDescriber* d) { describer_ = d; }
  void Reset();
  // Changes at every Reset(): ids handed out in an older epoch are gone.
  uint64_t epoch() const { return epoch_; }
  const uint64_t* epoch_address() const { return &epoch_; }

  // 0 for the empty string. Strings longer than kMaxValueBytes are cut at a
  // UTF-8 character boundary first.
  uint32_t String(std::string_view s);
  // The same id as String(s), asking `recent` first.
  uint32_t String(std::string_view s, RecentStrings* recent);
  // 0 for an empty stack. Interns each new pc as a LOCATION (asking the
  // PcDescriber once per pc per segment, again for an unnamed pc after the
  // describer's Generation() changed) and its MAPPING.
  // time_ns: when the event happened (0: unknown, taken as now).
  uint32_t Stack(const uint64_t* pcs, uint32_t npcs, uint64_t time_ns = 0);

  // Calls emit(kind, payload, len) for every pending table chunk, strings
  // first, then mappings, locations, stacks. Returns false if any emit did.
  template <class Emit>
  bool EmitPending(Emit&& emit);

  size_t pending_bytes() const;

 private:
  struct Chunk {
    uint32_t first_id = 0;
    uint32_t count = 0;
    MiVector<uint8_t> bytes;  // encoded entries
  };
  struct Table {
    uint32_t next_id = 1;
    MiVector<Chunk> pending;
    // Starts a new entry; returns the buffer to encode it into.
    MiVector<uint8_t>* BeginEntry(uint32_t* id);
    void Clear() {
      next_id = 1;
      pending.clear();
    }
  };
  struct MappingKey {
    uint64_t start, end, offset;
    uint32_t path, build_id;
    bool operator==(const MappingKey&) const = default;
  };
  struct MappingKeyHash {
    size_t operator()(const MappingKey& k) const;
  };
  // A stack key is its pc sequence; lookups by a borrowed span allocate nothing.
  struct PcSpan {
    const uint64_t* p;
    size_t n;
  };
  struct StackHash {
    using is_transparent = void;
    size_t operator()(const MiVector<uint64_t>& v) const { return (*this)(PcSpan{v.data(), v.size()}); }
    size_t operator()(PcSpan s) const;
  };
  struct StackEq {
    using is_transparent = void;
    static PcSpan S(const MiVector<uint64_t>& v) { return {v.data(), v.size()}; }
    static PcSpan S(PcSpan s) { return s; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return Same(S(a), S(b));
    }
    static bool Same(PcSpan a, PcSpan b);
  };

  struct LocationRef {
    uint32_t id;
    bool provisional;  // described without a function name: may improve
  };
  // What a provisional location was described as, and when.
  struct ProvisionalLocation {
    uint64_t generation;
    MiVector<uint8_t> entry;  // its encoded LOCATIONS entry
  };
  struct StackRef {
    uint32_t id;
    bool provisional;  // refers to a provisional location
  };
  // A provisional stack's location ids and the generation they were checked at.
  struct ProvisionalStack {
    uint64_t generation;
    MiVector<uint32_t> locations;
  };

  uint64_t Generation() { return describer_ ? describer_->Generation() : 0; }
  // Location id of pc; *provisional says whether it may still improve.
  uint32_t Location(uint64_t pc, uint64_t generation, bool* provisional);
  // Describes pc into scratch_entry_; returns whether a function was named.
  // (era: for an event older than world_start_; kNowEra otherwise)
  static constexpr uint64_t kNowEra = ~uint64_t{0};
  bool Describe(uint64_t pc, uint64_t era = kNowEra);
  // Forgets every pc's and stack's id.
  void ForgetPcs();
  // The describer's world changed: ForgetPcs.
  void NewWorld(uint64_t start);
  // Stack id in the describer's current world (every event when there is no describer).
  uint32_t StackNow(const uint64_t* pcs, size_t n);
  // Stack id for an event older than world_start_, of the describer's `era`.
  uint32_t StackBefore(const uint64_t* pcs, size_t n, uint64_t era);
  uint32_t NewStack(const MiVector<uint32_t>& loc_ids);
  uint32_t Recheck(StackRef* ref, const MiVector<uint64_t>& pcs);
  uint32_t Mapping(const MappingInfo& m);

  PcDescriber* describer_ = nullptr;
  static uint64_t NewEpoch();    // unique in the process, from 1
  uint64_t epoch_ = NewEpoch();  // renewed by Reset(): string ids of older epochs are gone
  Table strings_, mappings_, locations_, stacks_;
  MiHashMap<MiString, uint32_t, MiStringHash, MiStringEq> string_ids_;
  MiHashMap<MappingKey, uint32_t, MappingKeyHash> mapping_ids_;
  MiHashMap<uint64_t, LocationRef> location_ids_;
  MiHashMap<uint64_t, ProvisionalLocation> provisional_locations_;  // by pc
  MiHashMap<MiVector<uint64_t>, StackRef, StackHash, StackEq> stack_ids_;
  MiHashMap<uint32_t, ProvisionalStack> provisional_stacks_;  // by stack id
  uint64_t world_start_ = 0;                                  // the describer's WorldStart() these ids hold for
  bool described_ = false;                                    // Describe ran since Stack() last asked for the world
  static constexpr int kWorldAttempts = 4;
  // For events older than it: keyed by era and pc(s) (the era leads the key).
  struct PcEra {
    uint64_t pc, era;
    bool operator==(const PcEra&) const = default;
  };
  struct PcEraHash {
    size_t operator()(const PcEra& k) const {
      return static_cast<size_t>((k.pc ^ (k.era * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull);
    }
  };
  MiHashMap<PcEra, uint32_t, PcEraHash> before_location_ids_;
  MiHashMap<MiVector<uint64_t>, uint32_t, StackHash, StackEq> before_stack_ids_;
  MiVector<uint64_t> before_key_;  // era, then the pcs: the lookup key, reused
  // Reused across Describe calls. These are std:: types because PcDescriber's
  // contract uses them; reusing them keeps their allocations rare.
  MappingInfo scratch_mapping_;
  std::vector<FrameLine> scratch_lines_;
  MiVector<uint32_t> scratch_ids_;
  MiVector<uint8_t> scratch_entry_;
};

// Inline: called for every string field of every event.
inline uint32_t InternTables::String(std::string_view s, RecentStrings* recent) {
  if (s.empty() || s.size() > RecentStrings::kMaxBytes) return String(s);
  if (recent->epoch != epoch_) {
    recent->epoch = epoch_;
    recent->used = recent->next = 0;
  }
  for (uint32_t i = 0; i < recent->used; i++) {
    const RecentStrings::Entry& e = recent->entries[i];
    if (e.len == s.size() && std::memcmp(e.bytes, s.data(), s.size()) == 0) return e.id;
  }
  const uint32_t id = String(s);
  RecentStrings::Entry& e = recent->entries[recent->next];
  e.id = id;
  e.len = static_cast<uint8_t>(s.size());
  std::memcpy(e.bytes, s.data(), s.size());
  recent->next = (recent->next + 1) % RecentStrings::kEntries;
  if (recent->used < RecentStrings::kEntries) recent->used++;
  return id;
}

template <class Emit>
bool InternTables::EmitPending(Emit&& emit) {
  // Dependency order: mappings/locations refer to strings, locations to
  // mappings, stacks to locations.
  Table* order[] = {&strings_, &mappings_, &locations_, &stacks_};
  const BlockKind kinds[] = {BlockKind::kStrings, BlockKind::kMappings, BlockKind::kLocations, BlockKind::kStacks};
  MiVector<uint8_t> payload;
  for (int t = 0; t < 4; t++) {
    for (Chunk& c : order[t]->pending) {
      payload.clear();
      PutUvarint(&payload, c.first_id);
      PutUvarint(&payload, c.count);
      payload.insert(payload.end(), c.bytes.begin(), c.bytes.end());
      if (!emit(kinds[t], payload.data(), payload.size())) return false;
    }
    order[t]->pending.clear();
  }
  return true;
}

}  // namespace flightrec::format
