// Endpoint names (issue 41), prefix "endpoint": the classifier
// (preload/sockets/decode/endpoint_classify.h) on well-formed and hostile
// questions, the per-process name cap and slow rules (endpoint_names.h), and
// the hot path's prefix capture in the exchange slots (socket_prefix.h).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "preload/sockets/decode/endpoint_classify.h"
#include "preload/sockets/decode/endpoint_names.h"
#include "preload/sockets/socket_exchange.h"
#include "preload/sockets/socket_fd_table.h"
#include "preload/sockets/socket_prefix.h"

using namespace flightrec;

namespace {

std::string NameOf(const std::string& q, unsigned mask = kClassifyAll, EndpointInfo* out = nullptr) {
  EndpointInfo local;
  EndpointInfo* info = out ? out : &local;
  ClassifyQuestion(reinterpret_cast<const uint8_t*>(q.data()), q.size(), mask, true, info);
  return std::string(info->Name());
}

bool Sane(const EndpointInfo& i) {
  if (i.name_len == 0 || i.name_len > EndpointInfo::kMaxName) return false;
  for (size_t k = 0; k < i.name_len; ++k)
    if (static_cast<unsigned char>(i.name[k]) < 0x20 || static_cast<unsigned char>(i.name[k]) > 0x7e) return false;
  return i.request_id_len <= EndpointInfo::kMaxRequestId;
}

std::string Resp(std::initializer_list<std::string> args) {
  std::string s = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return s;
}

std::string Pg(char type, const std::string& body) {
  const uint32_t len = static_cast<uint32_t>(body.size() + 4);
  std::string s(1, type);
  s += static_cast<char>(len >> 24);
  s += static_cast<char>(len >> 16);
  s += static_cast<char>(len >> 8);
  s += static_cast<char>(len);
  return s + body;
}

}  // namespace

TEST_CASE("endpoint: HTTP/1.x method and path, ids collapsed, query dropped") {
  CHECK(NameOf("GET /users/12345 HTTP/1.1\r\nHost: x\r\n\r\n") == "GET /users/:id");
  CHECK(NameOf("POST /api/v2/orders?token=secret&x=1 HTTP/1.1\r\n\r\n") == "POST /api/v2/orders");
  CHECK(NameOf("GET /a/550e8400-e29b-41d4-a716-446655440000/b HTTP/1.1\r\n") == "GET /a/:id/b");
  CHECK(NameOf("GET /blob/deadbeef0123 HTTP/1.0\r\n") == "GET /blob/:id");
  CHECK(NameOf("GET /u/alice@example.com HTTP/1.1\r\n") == "GET /u/:id");
  CHECK(NameOf("GET /day/2024-01-31/x HTTP/1.1\r\n") == "GET /day/:id/x");
  CHECK(NameOf("GET /t/dGhpcyBpcyBhIHRva2VuMTIz HTTP/1.1\r\n") == "GET /t/:id");
  CHECK(NameOf("GET / HTTP/1.1\r\n") == "GET /");
  CHECK(NameOf("GET /static/ HTTP/1.1\r\n") == "GET /static/");
  CHECK(NameOf("GET /index.html HTTP/1.1\r\n") == "GET /index.html");
  CHECK(NameOf("GET http://example.com:8080/x/7?q HTTP/1.1\r\n") == "GET /x/:id");
  CHECK(NameOf("CONNECT db.internal:5432 HTTP/1.1\r\n") == "CONNECT :host");
  CHECK(NameOf("OPTIONS * HTTP/1.1\r\n") == "OPTIONS *");
  CHECK(NameOf("GET /a%2Fb/c HTTP/1.1\r\n") == "GET /:id/c");
  CHECK(NameOf("GET /1/2/3/4/5/6/7/8/9/10 HTTP/1.1\r\n") == "GET /:id/:id/:id/:id/:id/:id/:id/:id/*");
  // Not HTTP: a lowercase method, no space, an unknown verb.
  CHECK(NameOf("get / HTTP/1.1\r\n", kClassifyHttp) == "other");
  CHECK(NameOf("GETX / HTTP/1.1\r\n", kClassifyHttp) == "other");
  // The HTTP classifier off: not named as HTTP.
  CHECK(NameOf("GET /x HTTP/1.1\r\n", kClassifyRedis) != "GET /x");
}

TEST_CASE("endpoint: hostile HTTP: truncated, pipelined, NUL bytes, invalid UTF-8, a 1 MB request line") {
  CHECK(NameOf("GET /users/4") == "GET /users/:id");  // cut in the middle of the line
  CHECK(NameOf("GET ") == "GET /");
  CHECK(NameOf("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n") == "GET /a");  // the first of a pipeline
  CHECK(NameOf(std::string("GET /a\0b/c HTTP/1.1\r\n", 21)) == "GET /:id/c");
  CHECK(NameOf("GET /caf\xc3\xa9/\xff\xfe/x HTTP/1.1\r\n") == "GET /:id/:id/x");
  std::string huge = "GET /" + std::string(1 << 20, 'a') + " HTTP/1.1\r\n";
  EndpointInfo info;
  CHECK(NameOf(huge, kClassifyAll, &info) == "GET /:id");
  CHECK(Sane(info));
  std::string words = "GET ";
  for (int i = 0; i < 100000; ++i) words += "/abcdefgh";
  CHECK(NameOf(words, kClassifyAll, &info).size() <= EndpointInfo::kMaxName);
  CHECK(Sane(info));
  std::string long_word = "GET /" + std::string(30, 'q') + "/" + std::string(30, 'r') + "/" + std::string(30, 's') +
                          "/" + std::string(30, 't');
  CHECK(NameOf(long_word, kClassifyAll, &info).size() <= EndpointInfo::kMaxName);
  CHECK(info.Name().substr(info.name_len - 2) == "/*");
}

TEST_CASE("endpoint: traceparent and x-request-id, and nothing else from the headers") {
  EndpointInfo i;
  NameOf(
      "GET /x HTTP/1.1\r\nHost: h\r\nTraceParent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n"
      "x-request-id: abc-123\r\nCookie: secret\r\n\r\n",
      kClassifyAll, &i);
  CHECK(i.has_trace);
  CHECK(i.trace_hi == 0x4bf92f3577b34da6ull);
  CHECK(i.trace_lo == 0xa3ce929d0e0e4736ull);
  CHECK(i.parent_span == 0x00f067aa0ba902b7ull);
  CHECK(i.trace_flags == 1);
  CHECK(i.RequestId() == "abc-123");
  // Invalid: zero ids, uppercase hex, version ff, wrong length, a header cut by the prefix's end.
  for (const char* bad : {"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011"}) {
    EndpointInfo j;
    NameOf(std::string("GET / HTTP/1.1\r\ntraceparent: ") + bad + "\r\n\r\n", kClassifyAll, &j);
    CHECK_FALSE(j.has_trace);
  }
  EndpointInfo cut;
  NameOf("GET / HTTP/1.1\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9", kClassifyAll, &cut);
  CHECK_FALSE(cut.has_trace);
  EndpointInfo bad_id;
  NameOf("GET / HTTP/1.1\r\nx-request-id: a b\x01\r\n\r\n", kClassifyAll, &bad_id);
  CHECK(bad_id.request_id_len == 0);
  // Off unless asked for.
  EndpointInfo off;
  const std::string q =
      "GET / HTTP/1.1\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n";
  ClassifyQuestion(reinterpret_cast<const uint8_t*>(q.data()), q.size(), kClassifyAll, false, &off);
  CHECK_FALSE(off.has_trace);
}

TEST_CASE("endpoint: Redis RESP commands, never their arguments") {
  CHECK(NameOf(Resp({"get", "key:1"})) == "GET");
  CHECK(NameOf(Resp({"HSET", "h", "f", "v"})) == "HSET");
  CHECK(NameOf(Resp({"EVALSHA", "abc", "0"})) == "EVALSHA");
  CHECK(NameOf(Resp({"CONFIG", "GET", "save"})) == "CONFIG GET");
  CHECK(NameOf(Resp({"SET", "k", "v"}) + Resp({"GET", "k"})) == "SET");  // pipelined: the first
  CHECK(NameOf("PING\r\n") == "PING");
  CHECK(NameOf("set k v\r\n") == "SET");
  CHECK(NameOf("*2\r\n$3\r\nGE") == "other");         // cut before the name ends
  CHECK(NameOf("*2\r\n$999\r\nGET\r\n") == "other");  // a length past the bytes
  CHECK(NameOf("*1\r\n$3\r\n\x01\x02\x03\r\n") == "other");
}

TEST_CASE("endpoint: PostgreSQL frontend messages: kind and first keyword only") {
  CHECK(NameOf(Pg('Q', std::string("select * from t where secret = 'x'") + '\0')) == "Query SELECT");
  CHECK(NameOf(Pg('Q', std::string("  /* c */ -- x\n (insert into t values (1)") + '\0')) == "Query INSERT");
  CHECK(NameOf(Pg('P', std::string("stmt1\0UPDATE t SET a=1\0", 23) + std::string(2, '\0'))) == "Parse UPDATE");
  CHECK(NameOf(Pg('B', std::string(10, '\0'))) == "Bind");
  CHECK(NameOf(Pg('S', "")) == "Sync");
  CHECK(NameOf(Pg('X', "")) == "Terminate");
  std::string startup = {0, 0, 0, 8, 0, 3, 0, 0};
  CHECK(NameOf(startup) == "Startup");
  std::string ssl = {0, 0, 0, 8, 4, (char)0xd2, 0x16, 0x2f};
  CHECK(NameOf(ssl) == "SSLRequest");
  CHECK(NameOf(Pg('Q', std::string("\x01\x02", 2))) == "Query ?");
  CHECK(NameOf(Pg('S', "xx")) == "other");  // a Sync has no body
}

TEST_CASE("endpoint: h2, TLS, and binary garbage of any shape gives a sane name") {
  CHECK(NameOf("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") == "h2");
  CHECK(NameOf(std::string("\x16\x03\x01\x02\x00\x01", 6)) == "tls");
  CHECK(NameOf("") == "other");
  CHECK(NameOf(std::string("\0\0\0\0", 4)) == "other");
  std::mt19937 rng(41);
  std::vector<uint8_t> buf(600);
  const std::string seeds[] = {"GET /", "*3\r\n$", "Q\0\0\0", "PRI * ", "\x16\x03", "set ", "P\0\0\0\x20"};
  for (int round = 0; round < 200000; ++round) {
    const size_t n = rng() % buf.size();
    for (size_t k = 0; k < n; ++k) buf[k] = static_cast<uint8_t>(rng());
    const std::string& seed = seeds[round % 7];
    if (round % 2 && n >= seed.size()) memcpy(buf.data(), seed.data(), seed.size());
    EndpointInfo i;
    ClassifyQuestion(buf.data(), n, kClassifyAll, true, &i);
    if (!Sane(i)) {
      FAIL("insane name at round " << round);
      break;
    }
  }
}

TEST_CASE("endpoint: ten million distinct paths give at most the cap of names, the rest counted") {
  EndpointNames names(1000);
  EndpointInfo info;
  char q[64];
  uint32_t max_index = 0;
  for (uint32_t i = 0; i < 10000000; ++i) {
    // Letters only (digits would collapse to :id): base-26 of i.
    char word[8];
    uint32_t v = i;
    for (int k = 0; k < 7; ++k, v /= 26) word[k] = static_cast<char>('a' + v % 26);
    word[7] = 0;
    const int n = snprintf(q, sizeof(q), "GET /p/%s HTTP/1.1\r\n\r\n", word);
    ClassifyQuestion(reinterpret_cast<const uint8_t*>(q), static_cast<size_t>(n), kClassifyAll, false, &info);
    const uint32_t idx = names.Admit(info.Name());
    if (idx > max_index) max_index = idx;
  }
  CHECK(names.size() == 1000);
  CHECK(max_index == 999);
  CHECK(names.capped() == 10000000 - 998);
  CHECK(names.Name(1) == "other");
  CHECK(names.Admit("GET /p/zzzzzzz") == 1);  // past the cap: other
  CHECK(names.Admit("GET /p/aaaaaaa") == 2);  // admitted names stay
}

TEST_CASE("endpoint: names alike in length and outer bytes stay apart (the recent-names cache)") {
  // Same length, same first and last 8 bytes: one slot of the cache, so
  // every lookup after the first of each must tell them apart by content.
  EndpointNames names(100);
  std::vector<std::string> alike;
  for (char c = 'a'; c <= 'h'; ++c) alike.push_back(std::string("GET /users/") + c + "/settings");
  std::vector<uint32_t> first;
  for (const std::string& n : alike) first.push_back(names.Admit(n));
  for (size_t i = 0; i < first.size(); ++i)
    for (size_t j = i + 1; j < first.size(); ++j) CHECK(first[i] != first[j]);
  for (int round = 0; round < 3; ++round)
    for (size_t i = alike.size(); i-- > 0;) {
      CHECK(names.Admit(alike[i]) == first[i]);
      CHECK(names.Name(first[i]) == alike[i]);
    }
  // Short names (under 8 bytes) and the empty name.
  const uint32_t get = names.Admit("GET"), set = names.Admit("SET"), ge = names.Admit("GE");
  CHECK(get != set);
  CHECK(get != ge);
  CHECK(names.Admit("GET") == get);
  CHECK(names.Admit("SET") == set);
  CHECK(names.Admit("GE") == ge);
  CHECK(names.Admit("") == 0);
}

TEST_CASE("endpoint: names are redacted once, when admitted") {
  EndpointNames names(100);
  const uint32_t i = names.Admit("GET /x/Bearer abcdefghijklmnop");
  CHECK(names.Name(i).find("abcdefghijklmnop") == std::string_view::npos);
  CHECK(names.Admit("GET /x/Bearer abcdefghijklmnop") == i);
}

TEST_CASE("endpoint: slow rules: globs, first match wins, a plain number is every endpoint") {
  CHECK(EndpointGlobMatch("GET /api/*", "GET /api/users/:id"));
  CHECK_FALSE(EndpointGlobMatch("GET /api/*", "POST /api/users"));
  CHECK(EndpointGlobMatch("*", ""));
  CHECK(EndpointGlobMatch("? /*", "X /a"));
  CHECK_FALSE(EndpointGlobMatch(std::string(40, '*') + "b", std::string(2000, 'a')));
  format::MiVector<SlowRule> rules;
  uint64_t least = 0;
  REQUIRE(ParseSlowRules("GET /api/*=200, GET /health=0 ,*=1000", &rules, &least));
  CHECK(least == 200);
  EndpointNames names(100);
  names.SetSlowRules(&rules);
  CHECK(names.SlowNs(names.Admit("GET /api/x")) == 200000000ull);
  CHECK(names.SlowNs(names.Admit("GET /health")) == 0);
  CHECK(names.SlowNs(names.Admit("GET")) == 1000000000ull);
  CHECK(names.SlowNs(0) == 1000000000ull);
  REQUIRE(ParseSlowRules("250", &rules, &least));
  CHECK(least == 250);
  CHECK_FALSE(ParseSlowRules("GET /x", &rules, &least));
  CHECK_FALSE(ParseSlowRules("GET /x=abc", &rules, &least));
  unsigned mask = 0;
  CHECK(ParseEndpointClassifiers("redis, http", &mask));
  CHECK(mask == (kClassifyRedis | kClassifyHttp));
  CHECK(ParseEndpointClassifiers("off", &mask));
  CHECK(mask == 0);
  CHECK_FALSE(ParseEndpointClassifiers("smtp", &mask));
}

TEST_CASE("endpoint: the hot path copies a question once, across split receives, up to the cap") {
  REQUIRE(sockfd::Init(4096));
  REQUIRE(sockex::Init(sockfd::g_table_size, ~uint64_t{0} >> 1));
  REQUIRE(sockpfx::Init(sockfd::g_table_size, sockpfx::kCapDefault));
  const int fd = 3101;
  sockex::Slot& s = sockex::g_slots[fd];
  s.word = 0;
  const uint64_t e =
      sockfd::MakeEntry(901, sockfd::SockRole::kServer, sockfd::SockFamily::kInet, sockfd::SockType::kStream);
  const std::string req = "GET /split/7 HTTP/1.1\r\nHost: x\r\n\r\n";
  // One byte per receive.
  for (size_t i = 0; i < req.size(); ++i)
    CHECK(sockex::Account(e, fd, false, false, false, 10 + i, 11 + i, 1, sockpfx::FromBuf(req.data() + i)));
  CHECK((s.word & sockex::kSPfx) != 0);
  CHECK(std::string(reinterpret_cast<char*>(sockpfx::Of(fd).bytes), sockpfx::Of(fd).len) == req);
  // A peek is not the question.
  CHECK(sockex::Account(e, fd, false, true, false, 100, 101, 5, sockpfx::FromBuf("XXXXX")));
  CHECK(sockpfx::Of(fd).len == req.size());
  // The answer, then the next question starts afresh.
  CHECK(sockex::Account(e, fd, true, false, false, 200, 201, 10, sockpfx::FromBuf("HTTP/1.1 2")));
  const std::string big(10000, 'b');
  CHECK(sockex::Account(e, fd, false, false, false, 300, 301, 3, sockpfx::FromBuf("GET")));
  CHECK(sockpfx::Of(fd).len == 3);
  CHECK(sockex::Account(e, fd, false, false, false, 302, 303, int64_t(big.size()), sockpfx::FromBuf(big.data())));
  CHECK(sockpfx::Of(fd).len == sockpfx::Cap());
  CHECK((s.word & sockex::kSPfxDone) != 0);
  // Full: later receives of the exchange copy nothing (the byte after the cap stays as it was).
  CHECK(sockex::Account(e, fd, false, false, false, 304, 305, 3, sockpfx::FromBuf("zzz")));
  CHECK(sockpfx::Of(fd).len == sockpfx::Cap());
  CHECK(sockpfx::Of(fd).bytes[sockpfx::Cap() - 1] == 'b');
  // An iovec question (readv) on a client: its sends are the question.
  const int cfd = 3102;
  sockex::g_slots[cfd].word = 0;
  const uint64_t ce =
      sockfd::MakeEntry(902, sockfd::SockRole::kClient, sockfd::SockFamily::kInet, sockfd::SockType::kStream);
  char a[] = "*1\r\n", b[] = "$4\r\nPING\r\n";
  iovec iov[2] = {{a, 4}, {b, 10}};
  CHECK(sockex::Account(ce, cfd, true, false, false, 1, 2, 14, sockpfx::FromIov(iov, 2)));
  CHECK(std::string(reinterpret_cast<char*>(sockpfx::Of(cfd).bytes), sockpfx::Of(cfd).len) == "*1\r\n$4\r\nPING\r\n");
  // The answer (a receive) is not copied.
  CHECK(sockex::Account(ce, cfd, false, false, false, 3, 4, 7, sockpfx::FromBuf("+PONG\r\n")));
  CHECK(sockpfx::Of(cfd).len == 14);
}
