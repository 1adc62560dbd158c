/* Whether an x86-64 return address follows a call instruction: the test the stack walks make before
 * they take the top of the stack for the return address of a sampled frame no unwind information
 * covers (JIT code): bpf/cfi_walk.bpf.h, hpd/unwind/unwinder.h, collect/src/bpf/cfi_user_walk.cpp.
 * Plain C, no includes: the eBPF programs compile it too. */
#ifndef HPD_BASE_X86_CALL_H
#define HPD_BASE_X86_CALL_H

/* The length of the call instruction ending right before a return address, 0 when the bytes there are
 * none: `before` holds the 8 bytes below the return address (before[7] is the byte at ra - 1). The
 * calls are E8 rel32 (5 bytes) and FF /2 in each of its forms (2 to 7 bytes from the opcode; a REX
 * prefix before it is not counted): through a register, through memory at a register (with a SIB
 * byte or not, with an 8- or 32-bit displacement or none), at rip + disp32 (-fno-plt), at an index
 * alone (disp32 without base). */
static inline int hpd_x86_call_length_before(const unsigned char before[8]) {
  if (before[3] == 0xe8) return 5;
#ifdef __bpf__
#pragma unroll
#endif
  for (int at = 6; at >= 1; at--) {
    if (before[at] != 0xff) continue;
    const unsigned char modrm = before[at + 1];
    if (((modrm >> 3) & 7) != 2) continue;
    const int mod = modrm >> 6;
    const int rm = modrm & 7;
    int length = 2;
    if (mod != 3 && rm == 4) {
      if (at + 2 > 7) continue; /* its SIB byte would be the return address's */
      length += 1;
      if (mod == 0 && (before[at + 2] & 7) == 5) length += 4; /* [index*scale + disp32] */
    }
    if (mod == 1) length += 1;
    if (mod == 2 || (mod == 0 && rm == 5)) length += 4;
    if (at + length == 8) return length;
  }
  return 0;
}

#endif
