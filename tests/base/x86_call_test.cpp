// hpd_x86_call_length_before against the assembler's own encodings: a block of instructions in this
// test's text, each followed by a label, the bytes before each label read from the test's own code.
#include "hpd/base/x86_call.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

// Never run: only its bytes are read. Each `x86_call_test_N:` label ends the instruction before it;
// 8 bytes of int3 first, so that the first instruction's 8 bytes below its end lie in this block.
__asm__(
    ".text\n"
    ".globl x86_call_test_block\n"
    "x86_call_test_block:\n"
    ".fill 8, 1, 0xcc\n"
    "call x86_call_test_block\n"
    "x86_call_test_c1:\n"
    "call *%rax\n"
    "x86_call_test_c2:\n"
    "call *%r11\n"
    "x86_call_test_c3:\n"
    "call *(%rax)\n"
    "x86_call_test_c4:\n"
    "call *(%r12)\n"
    "x86_call_test_c5:\n"
    "call *(%rsp)\n"
    "x86_call_test_c6:\n"
    "call *0x8(%rax)\n"
    "x86_call_test_c7:\n"
    "call *0x8(%rsp)\n"
    "x86_call_test_c8:\n"
    "call *0x12345678(%rbx)\n"
    "x86_call_test_c9:\n"
    "call *0x12345678(%rsp)\n"
    "x86_call_test_c10:\n"
    "call *0x12345678(%rip)\n"
    "x86_call_test_c11:\n"
    "call *(%rax,%rbx,8)\n"
    "x86_call_test_c12:\n"
    "call *0x10(%rax,%rbx,8)\n"
    "x86_call_test_c13:\n"
    "call *0x12345678(,%rbx,8)\n"
    "x86_call_test_c14:\n"
    "call *(%r13)\n"
    "x86_call_test_c15:\n"
    // Not calls, each after int3s: FF's other forms (jmp, push, inc), other instructions.
    ".fill 8, 1, 0xcc\n"
    "jmp *%rax\n"
    "x86_call_test_n1:\n"
    ".fill 8, 1, 0xcc\n"
    "push 0x8(%rax)\n"
    "x86_call_test_n2:\n"
    ".fill 8, 1, 0xcc\n"
    "incq 0x12345678(%rip)\n"
    "x86_call_test_n3:\n"
    ".fill 8, 1, 0xcc\n"
    "jmp *0x12345678(%rip)\n"
    "x86_call_test_n4:\n"
    ".fill 8, 1, 0xcc\n"
    "mov %rdi, %rax\n"
    "x86_call_test_n5:\n"
    ".fill 8, 1, 0xcc\n"
    "add $1, %rax\n"
    "x86_call_test_n6:\n"
    ".fill 8, 1, 0xcc\n"
    "ret\n"
    "x86_call_test_n7:\n"
    ".fill 8, 1, 0xcc\n"
    "nop\n"
    "x86_call_test_n8:\n"
    ".fill 8, 1, 0xcc\n"
    "lea 0x8(%rsp), %rdi\n"
    "x86_call_test_n9:\n"
    ".fill 8, 1, 0xcc\n"
    "movabs $0x1122334455667788, %rax\n"
    "x86_call_test_n10:\n");

extern "C" {
extern const unsigned char x86_call_test_c1[], x86_call_test_c2[], x86_call_test_c3[], x86_call_test_c4[],
    x86_call_test_c5[], x86_call_test_c6[], x86_call_test_c7[], x86_call_test_c8[], x86_call_test_c9[],
    x86_call_test_c10[], x86_call_test_c11[], x86_call_test_c12[], x86_call_test_c13[], x86_call_test_c14[],
    x86_call_test_c15[];
extern const unsigned char x86_call_test_n1[], x86_call_test_n2[], x86_call_test_n3[], x86_call_test_n4[],
    x86_call_test_n5[], x86_call_test_n6[], x86_call_test_n7[], x86_call_test_n8[], x86_call_test_n9[],
    x86_call_test_n10[];
}

namespace hpd {
namespace {

int length_before(const unsigned char* end) {
  unsigned char before[8];
  std::memcpy(before, end - 8, sizeof before);
  return hpd_x86_call_length_before(before);
}

TEST(X86Call, EveryFormOfCallIsFoundWithItsLength) {
  struct Case {
    const unsigned char* end;
    int length;
    const char* instruction;
  };
  const Case calls[] = {
      {x86_call_test_c1, 5, "call rel32"},
      {x86_call_test_c2, 2, "call *%rax"},
      {x86_call_test_c3, 2, "call *%r11"},
      {x86_call_test_c4, 2, "call *(%rax)"},
      {x86_call_test_c5, 3, "call *(%r12)"},
      {x86_call_test_c6, 3, "call *(%rsp)"},
      {x86_call_test_c7, 3, "call *0x8(%rax)"},
      {x86_call_test_c8, 4, "call *0x8(%rsp)"},
      {x86_call_test_c9, 6, "call *0x12345678(%rbx)"},
      {x86_call_test_c10, 7, "call *0x12345678(%rsp)"},
      {x86_call_test_c11, 6, "call *0x12345678(%rip)"},
      {x86_call_test_c12, 3, "call *(%rax,%rbx,8)"},
      {x86_call_test_c13, 4, "call *0x10(%rax,%rbx,8)"},
      {x86_call_test_c14, 7, "call *0x12345678(,%rbx,8)"},
      {x86_call_test_c15, 3, "call *(%r13)"},
  };
  for (const Case& c : calls) {
    // The length from the opcode on: a REX prefix before FF (r8-r15) is not counted.
    EXPECT_EQ(length_before(c.end), c.length) << c.instruction;
  }
}

TEST(X86Call, OtherInstructionsAreNotCalls) {
  const std::pair<const unsigned char*, const char*> others[] = {
      {x86_call_test_n1, "jmp *%rax"},
      {x86_call_test_n2, "push 0x8(%rax)"},
      {x86_call_test_n3, "incq 0x12345678(%rip)"},
      {x86_call_test_n4, "jmp *0x12345678(%rip)"},
      {x86_call_test_n5, "mov %rdi, %rax"},
      {x86_call_test_n6, "add $1, %rax"},
      {x86_call_test_n7, "ret"},
      {x86_call_test_n8, "nop"},
      {x86_call_test_n9, "lea 0x8(%rsp), %rdi"},
      {x86_call_test_n10, "movabs $0x1122334455667788, %rax"},
  };
  for (const auto& [end, instruction] : others) EXPECT_EQ(length_before(end), 0) << instruction;
}

TEST(X86Call, TheBytesOfAnE8AnywhereButFiveBeforeAreNotACall) {
  unsigned char before[8];
  for (int at = 0; at < 8; ++at) {
    std::memset(before, 0x90, sizeof before);
    before[at] = 0xe8;
    EXPECT_EQ(hpd_x86_call_length_before(before), at == 3 ? 5 : 0) << "E8 at " << at;
  }
}

}  // namespace
}  // namespace hpd
