// A benchmark for profile-guided optimization: generated arithmetic programs (text) are lexed,
// parsed by recursive descent into bytecode and run on a stack machine, over and over. Branchy
// code whose hot paths depend on the input: the lexer's character classes, the parser's
// precedence levels, the interpreter's opcode switch (one instruction a call of `step`, which the
// plain run and the traced run share, so that only a profile tells the inliner which is hot).
// PGO_TRACE=1 in the environment prints every instruction executed on stderr.
//
//   pgo_interp [ROUNDS]   run ROUNDS rounds (default 40) and print what was done and a checksum,
//                         so that every build of it can be checked to do the same work.
//   pgo_interp --lines CPU_MS
//                         burn CPU_MS of CPU time in two functions whose hot lines are marked
//                         (the tests read the markers): burn_loop's loop, and an inlined helper.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace pgo {

// ---- the input: programs of assignments and expressions, as text ----------------------------

struct Rng {
  uint64_t s;
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
  uint32_t below(uint32_t n) { return next() % n; }
};

const char* const kNames[] = {"alpha", "beta", "gamma", "delta", "x", "y", "z", "count", "total", "rate"};
constexpr int kNameCount = 10;

void gen_expr(Rng& r, std::string& out, int depth) {
  const uint32_t pick = r.below(depth > 4 ? 4 : 10);
  if (pick < 2) {
    out += std::to_string(r.below(1000));
  } else if (pick < 4) {
    out += kNames[r.below(kNameCount)];
  } else if (pick < 6) {
    out += '(';
    gen_expr(r, out, depth + 1);
    out += ')';
  } else if (pick == 6) {
    out += '-';
    gen_expr(r, out, depth + 1);
  } else {
    gen_expr(r, out, depth + 1);
    static const char* const ops[] = {" + ", " - ", " * ", " / ", " % ", " < ", " == ", " + ", " * ", " - "};
    out += ops[r.below(10)];
    gen_expr(r, out, depth + 1);
  }
}

std::string gen_program(Rng& r, int statements) {
  std::string text;
  for (int i = 0; i < statements; ++i) {
    text += kNames[r.below(kNameCount)];
    text += " = ";
    gen_expr(r, text, 0);
    text += ";\n";
  }
  return text;
}

// ---- lexer -----------------------------------------------------------------------------------

enum Tok : uint8_t {
  kEnd,
  kNum,
  kIdent,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kPercent,
  kLess,
  kEqEq,
  kAssign,
  kLParen,
  kRParen,
  kSemi
};

struct Token {
  Tok kind;
  int32_t value;  // number, or variable index
};

int name_index(const char* s, size_t n) {
  for (int i = 0; i < kNameCount; ++i) {
    if (std::strlen(kNames[i]) == n && std::memcmp(kNames[i], s, n) == 0) return i;
  }
  return -1;
}

bool lex(const std::string& text, std::vector<Token>& out) {
  out.clear();
  const char* p = text.c_str();
  while (*p != 0) {
    const char c = *p;
    if (c == ' ' || c == '\n' || c == '\t') {
      ++p;
    } else if (c >= '0' && c <= '9') {
      int32_t v = 0;
      while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
      out.push_back({kNum, v});
    } else if ((c >= 'a' && c <= 'z') || c == '_') {
      const char* start = p;
      while ((*p >= 'a' && *p <= 'z') || *p == '_') ++p;
      const int index = name_index(start, static_cast<size_t>(p - start));
      if (index < 0) return false;
      out.push_back({kIdent, index});
    } else {
      Tok t;
      switch (c) {
        case '+': t = kPlus; break;
        case '-': t = kMinus; break;
        case '*': t = kStar; break;
        case '/': t = kSlash; break;
        case '%': t = kPercent; break;
        case '<': t = kLess; break;
        case '(': t = kLParen; break;
        case ')': t = kRParen; break;
        case ';': t = kSemi; break;
        case '=':
          if (p[1] == '=') {
            t = kEqEq;
            ++p;
          } else {
            t = kAssign;
          }
          break;
        default: return false;
      }
      ++p;
      out.push_back({t, 0});
    }
  }
  out.push_back({kEnd, 0});
  return true;
}

// ---- parser: recursive descent into stack-machine code ---------------------------------------

enum Op : uint8_t { kPush, kLoad, kStore, kAdd, kSub, kMul, kDiv, kMod, kLt, kEq, kNeg, kHalt };

struct Insn {
  Op op;
  int32_t arg;
};

struct Parser {
  const std::vector<Token>& toks;
  size_t at = 0;
  std::vector<Insn>& code;

  Tok peek() const { return toks[at].kind; }
  void primary() {
    const Token t = toks[at++];
    if (t.kind == kNum) {
      code.push_back({kPush, t.value});
    } else if (t.kind == kIdent) {
      code.push_back({kLoad, t.value});
    } else if (t.kind == kLParen) {
      compare();
      ++at;  // ')'
    } else if (t.kind == kMinus) {
      primary();
      code.push_back({kNeg, 0});
    }
  }
  void term() {
    primary();
    for (;;) {
      const Tok k = peek();
      if (k != kStar && k != kSlash && k != kPercent) return;
      ++at;
      primary();
      code.push_back({k == kStar ? kMul : k == kSlash ? kDiv : kMod, 0});
    }
  }
  void sum() {
    term();
    for (;;) {
      const Tok k = peek();
      if (k != kPlus && k != kMinus) return;
      ++at;
      term();
      code.push_back({k == kPlus ? kAdd : kSub, 0});
    }
  }
  void compare() {
    sum();
    for (;;) {
      const Tok k = peek();
      if (k != kLess && k != kEqEq) return;
      ++at;
      sum();
      code.push_back({k == kLess ? kLt : kEq, 0});
    }
  }
  void program() {
    while (peek() == kIdent) {
      const int32_t var = toks[at].value;
      at += 2;  // name '='
      compare();
      ++at;  // ';'
      code.push_back({kStore, var});
    }
    code.push_back({kHalt, 0});
  }
};

// ---- the stack machine -----------------------------------------------------------------------

// One instruction; false at kHalt. Called from two loops, so the inliner weighs it on its own.
bool step(const Insn& in, int64_t* stack, int& sp, int64_t* vars) {
  switch (in.op) {
    case kPush: stack[sp++] = in.arg; break;
    case kLoad: stack[sp++] = vars[in.arg]; break;
    case kStore: vars[in.arg] = stack[--sp]; break;
    case kAdd:
      --sp;
      stack[sp - 1] += stack[sp];
      break;
    case kSub:
      --sp;
      stack[sp - 1] -= stack[sp];
      break;
    case kMul:
      --sp;
      stack[sp - 1] = (stack[sp - 1] * stack[sp]) % 1000003;
      break;
    case kDiv:
      --sp;
      stack[sp - 1] = stack[sp] != 0 ? stack[sp - 1] / stack[sp] : 0;
      break;
    case kMod:
      --sp;
      stack[sp - 1] = stack[sp] != 0 ? stack[sp - 1] % stack[sp] : 0;
      break;
    case kLt:
      --sp;
      stack[sp - 1] = stack[sp - 1] < stack[sp];
      break;
    case kEq:
      --sp;
      stack[sp - 1] = stack[sp - 1] == stack[sp];
      break;
    case kNeg: stack[sp - 1] = -stack[sp - 1]; break;
    case kHalt: return false;
  }
  if (sp < 0 || sp >= 256) {
    std::fprintf(stderr, "stack out of bounds at %d\n", sp);
    std::abort();
  }
  return true;
}

int64_t run(const std::vector<Insn>& code, int64_t* vars) {
  int64_t stack[256];
  int sp = 0;
  int64_t steps = 1;
  for (size_t pc = 0; step(code[pc], stack, sp, vars); ++pc) ++steps;
  return steps;
}

// The same with a trace of every instruction (for debugging a program; not used by the benchmark).
int64_t run_traced(const std::vector<Insn>& code, int64_t* vars) {
  int64_t stack[256];
  int sp = 0;
  int64_t steps = 1;
  for (size_t pc = 0; step(code[pc], stack, sp, vars); ++pc) {
    std::fprintf(stderr, "%zu op %d sp %d\n", pc, code[pc].op, sp);
    ++steps;
  }
  return steps;
}

// ---- the fixed-line fixture (--lines) ---------------------------------------------------------

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) uint64_t burn_loop(uint64_t n, uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t i = 0; i < n; ++i) x = x * 2862933555777941757ull + (x >> 29) + i;  // HOT LINE burn_loop
  return x;
}

static inline __attribute__((always_inline)) uint64_t mix_inlined(uint64_t x, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) x ^= (x << 13) + (x >> 7) + i;  // HOT LINE mix_inlined
  return x;
}

__attribute__((noinline)) uint64_t calls_mix(uint64_t n, uint64_t seed) {
  uint64_t x = seed + 1;
  x = mix_inlined(x, n);  // CALL LINE calls_mix
  return x;
}

int lines_mode(double ms) {
  const double start = cpu_ms();
  uint64_t sum = 0, rounds = 0;
  while (cpu_ms() - start < ms) {
    sum += burn_loop(2000000, rounds);
    sum += calls_mix(2000000, rounds);
    ++rounds;
  }
  std::printf("lines rounds=%llu checksum=%llu\n", static_cast<unsigned long long>(rounds),
              static_cast<unsigned long long>(sum));
  return 0;
}

}  // namespace pgo

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--lines") == 0) return pgo::lines_mode(std::atof(argv[2]));
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  pgo::Rng rng{12345};
  std::vector<std::string> programs;
  for (int i = 0; i < 64; ++i) programs.push_back(pgo::gen_program(rng, 40));
  std::vector<pgo::Token> toks;
  std::vector<pgo::Insn> code;
  uint64_t checksum = 0, steps = 0, parsed = 0;
  const bool trace = std::getenv("PGO_TRACE") != nullptr;  // every instruction on stderr
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& text : programs) {
      if (!pgo::lex(text, toks)) return 1;
      code.clear();
      pgo::Parser parser{toks, 0, code};
      parser.program();
      ++parsed;
      int64_t vars[pgo::kNameCount];
      for (int run = 0; run < 60; ++run) {
        for (int v = 0; v < pgo::kNameCount; ++v) vars[v] = (run * 7 + v * 13 + round) % 97;
        steps += static_cast<uint64_t>(trace ? pgo::run_traced(code, vars) : pgo::run(code, vars));
        for (int v = 0; v < pgo::kNameCount; ++v) checksum = checksum * 31 + static_cast<uint64_t>(vars[v]);
      }
    }
  }
  std::printf("programs=%llu instructions=%llu checksum=%llu\n", static_cast<unsigned long long>(parsed),
              static_cast<unsigned long long>(steps), static_cast<unsigned long long>(checksum));
  return 0;
}
