/* Whether an x86-64 return address follows a call instruction: the test the stack walks make before
 * they take the top of the stack for the return address of a sampled frame no unwind information
 * covers (JIT code): bpf/cfi_walk.bpf.h, hpd/unwind/unwinder.h, collect/src/bpf/cfi_user_walk.cpp.
 * Plain C, no includes: the eBPF programs compile it too. */
#ifndef HPD_BASE_X86_CALL_H
#define HPD_BASE_X86_CALL_H

/* The length of an FF /2 call (through a register, through memory at a register with a SIB byte or not,
 * with an 8- or 32-bit displacement or none, at rip + disp32 as -fno-plt builds call, at an index
 * alone) whose opcode is before[at] (1 <= at <= 6) and that ends right before the return address;
 * 0 when the bytes there are no such call. `before` holds the 8 bytes below the return address
 * (before[7] is the byte at ra - 1); a REX prefix before the opcode is not counted. */
static inline int hpd_x86_ff_call_length_at(const unsigned char before[8], unsigned at) {
  if (at < 1 || at > 6 || before[at] != 0xff) return 0;
  const unsigned modrm = before[at + 1];
  if (((modrm >> 3) & 7) != 2) return 0;
  const unsigned mod = modrm >> 6;
  const unsigned rm = modrm & 7;
  unsigned length = 2;
  if (mod != 3 && rm == 4) {
    if (at == 6) return 0; /* its SIB byte would be the return address's own */
    length += 1;
    if (mod == 0 && (before[(at + 2) & 7] & 7) == 5) length += 4; /* [index*scale + disp32] */
  }
  if (mod == 1) length += 1;
  if (mod == 2 || (mod == 0 && rm == 5)) length += 4;
  return at + length == 8 ? (int)length : 0;
}

/* The length of the call instruction ending right before a return address, 0 when the bytes there are
 * none: E8 rel32 (5 bytes), or FF /2 in one of its forms (hpd_x86_ff_call_length_at, at any of the
 * positions it may start at). The eBPF programs take the positions one per bpf_loop step instead (the
 * verifier would follow every path of six unrolled ones). */
static inline int hpd_x86_call_length_before(const unsigned char before[8]) {
  if (before[3] == 0xe8) return 5;
  for (unsigned at = 6; at >= 1; at--) {
    const int length = hpd_x86_ff_call_length_at(before, at);
    if (length != 0) return length;
  }
  return 0;
}

#endif
