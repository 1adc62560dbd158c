/* libhpdcalls.so's entry points for instrumented code: mcount / _mcount (gcc and clang -pg, rustc
 * -Zinstrument-mcount), __fentry__ (-mfentry, and NOP sites patched at start-up), and the trampoline
 * that a hooked function returns into. They save what the instrumented code expects to survive,
 * align the stack and call the C side (runtime.c, built with -mgeneral-regs-only, so the vector and
 * x87 registers that carry float arguments and results are never touched). */

        .text

/* Saves the registers that may carry arguments (rdi rsi rdx rcx r8 r9, rax = vector-argument count
 * of a variadic call, r10 = static chain of nested functions, xmm0-7), aligned to 16 bytes, in a
 * frame-pointer frame (rbp saved at the entry rsp - 8, then pointing there): CFA = rbp + 16, a rule
 * hpd's own in-kernel CFI walk and any frame-pointer walk follow, so a sample taken inside the
 * runtime still unwinds into the program. The C side never touches xmm, but the first call of a
 * thread or process sets up through libc, whose string functions do. */
.macro SAVE_ARGS
        push    %rbp
        .cfi_def_cfa_offset 16
        .cfi_offset rbp, -16
        mov     %rsp, %rbp
        .cfi_def_cfa_register rbp
        and     $-16, %rsp
        sub     $192, %rsp
        movaps  %xmm0, 64(%rsp)
        movaps  %xmm1, 80(%rsp)
        movaps  %xmm2, 96(%rsp)
        movaps  %xmm3, 112(%rsp)
        movaps  %xmm4, 128(%rsp)
        movaps  %xmm5, 144(%rsp)
        movaps  %xmm6, 160(%rsp)
        movaps  %xmm7, 176(%rsp)
        mov     %rdi, 0(%rsp)
        mov     %rsi, 8(%rsp)
        mov     %rdx, 16(%rsp)
        mov     %rcx, 24(%rsp)
        mov     %r8, 32(%rsp)
        mov     %r9, 40(%rsp)
        mov     %rax, 48(%rsp)
        mov     %r10, 56(%rsp)
.endm

.macro RESTORE_ARGS
        mov     0(%rsp), %rdi
        mov     8(%rsp), %rsi
        mov     16(%rsp), %rdx
        mov     24(%rsp), %rcx
        mov     32(%rsp), %r8
        mov     40(%rsp), %r9
        mov     48(%rsp), %rax
        mov     56(%rsp), %r10
        movaps  64(%rsp), %xmm0
        movaps  80(%rsp), %xmm1
        movaps  96(%rsp), %xmm2
        movaps  112(%rsp), %xmm3
        movaps  128(%rsp), %xmm4
        movaps  144(%rsp), %xmm5
        movaps  160(%rsp), %xmm6
        movaps  176(%rsp), %xmm7
        mov     %rbp, %rsp
        .cfi_def_cfa rsp, 16
        pop     %rbp
        .cfi_def_cfa_offset 8
        .cfi_restore rbp
.endm

/* __fentry__: called as a function's first instruction. [rsp] is in the callee, [rsp+8] is the
 * slot holding the return address into the caller. */
        .globl  __fentry__
        .type   __fentry__, @function
        .p2align 4
__fentry__:
        .cfi_startproc
        SAVE_ARGS
        lea     16(%rbp), %rdi          /* the caller's return-address slot (see hpd_calls_enter) */
        mov     8(%rbp), %rsi           /* selfpc, in the callee */
        mov     $1, %edx                /* __fentry__ */
        call    hpd_calls_enter
        RESTORE_ARGS
        ret
        .cfi_endproc
        .size   __fentry__, . - __fentry__

/* mcount: called after the callee's `push rbp; mov rsp,rbp` (and, with clang or rustc, after the
 * rest of its prologue). [rsp] is in the callee, [rbp+8] is the slot of the return address into
 * the caller. */
        .globl  mcount
        .type   mcount, @function
        .globl  _mcount
        .type   _mcount, @function
        .p2align 4
mcount:
_mcount:
        .cfi_startproc
        SAVE_ARGS
        mov     0(%rbp), %rdi           /* the callee's rbp, saved by SAVE_ARGS ... */
        add     $8, %rdi                /* ... and above it the slot of its return address */
        mov     8(%rbp), %rsi           /* selfpc, in the callee */
        xor     %edx, %edx              /* mcount */
        call    hpd_calls_enter
        RESTORE_ARGS
        ret
        .cfi_endproc
        .size   mcount, . - mcount
        .size   _mcount, . - _mcount

/* A hooked function returns here instead of to its caller: rax and rdx hold its integer result
 * (vector and x87 results are untouched). hpd_calls_exit gets the address just above the slot the
 * return address was in and writes the original return address back into that slot.
 * The trampoline first takes the slot back (rsp -= 8) and builds a frame-pointer frame on it, so
 * that it unwinds like the function the caller called: while the slot still holds the hook, hpd's
 * walkers find the original in the thread's shadow stack; once hpd_calls_exit has popped the shadow
 * frame, the slot holds the original. Before this, samples in the return path ended here. */
        .globl  hpd_calls_return_trampoline
        .hidden hpd_calls_return_trampoline
        .type   hpd_calls_return_trampoline, @function
        .p2align 4
        nop                             /* a return address minus one still lands in this symbol */
hpd_calls_return_trampoline:
        .cfi_startproc
        .cfi_def_cfa rsp, 0             /* the callee's ret popped the slot: it is at rsp - 8 */
        sub     $8, %rsp
        .cfi_def_cfa_offset 8
        push    %rbp
        .cfi_def_cfa_offset 16
        .cfi_offset rbp, -16
        mov     %rsp, %rbp
        .cfi_def_cfa_register rbp
        and     $-16, %rsp
        sub     $32, %rsp
        mov     %rax, 0(%rsp)
        mov     %rdx, 8(%rsp)
        mov     %rcx, 16(%rsp)
        lea     16(%rbp), %rdi          /* rsp after the callee's ret */
        call    hpd_calls_exit          /* the slot holds the original return address again */
        mov     0(%rsp), %rax
        mov     8(%rsp), %rdx
        mov     16(%rsp), %rcx
        mov     %rbp, %rsp
        .cfi_def_cfa rsp, 16
        pop     %rbp
        .cfi_def_cfa_offset 8
        .cfi_restore rbp
        ret
        .cfi_endproc
        .size   hpd_calls_return_trampoline, . - hpd_calls_return_trampoline

        .section .note.GNU-stack,"",@progbits
