// The exported entry points `dlsym` and `dlvsym` of libndtrace.so (x86-64 only).
//
// glibc interprets RTLD_NEXT relative to the object its caller's return address lies in. A C
// function that forwards dlsym(RTLD_NEXT, name) to the real dlsym therefore asks for "the
// next definition after libndtrace.so", not after the program's caller: a second preloaded
// library that looks up its own symbol with RTLD_NEXT would get itself back and recurse
// forever (research/cuda-interposition.md §1.3-1.4). So this entry, written in assembly,
// does not call for RTLD_NEXT: it tail-jumps to the real function with the caller's return
// address still on the stack, so glibc sees the original caller. Every other handle goes to
// the C++ dispatchers in preload_entry.cc (ndt_dlsym_dispatch, ndt_dlvsym_dispatch), which may
// hand out wrappers for CUDA driver functions.
//
// ndt_real_dlsym / ndt_real_dlvsym hold the C library's functions; while they are still null
// (the very first call) ndt_resolve_real_dl fills them, with the argument registers saved
// around the call and the stack 16-byte aligned for it.
  .text

  .globl dlsym
  .type dlsym, @function
dlsym:
  .cfi_startproc
  cmpq $-1, %rdi                     // RTLD_NEXT is ((void*)-1)
  jne ndt_dlsym_dispatch
  movq ndt_real_dlsym(%rip), %rax
  testq %rax, %rax
  jz 1f
  jmp *%rax
1:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp                      // entry rsp = 8 mod 16; two pushes + 8 = 0 mod 16
  .cfi_adjust_cfa_offset 8
  call ndt_resolve_real_dl
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  movq ndt_real_dlsym(%rip), %rax
  testq %rax, %rax
  jz 2f
  jmp *%rax
2:
  xorl %eax, %eax                    // no C library dlsym found: nothing can be found
  ret
  .cfi_endproc
  .size dlsym, .-dlsym

  .globl dlvsym
  .type dlvsym, @function
dlvsym:
  .cfi_startproc
  cmpq $-1, %rdi
  jne ndt_dlvsym_dispatch
  movq ndt_real_dlvsym(%rip), %rax
  testq %rax, %rax
  jz 1f
  jmp *%rax
1:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  pushq %rdx                         // three pushes: rsp = 0 mod 16 at the call
  .cfi_adjust_cfa_offset 8
  call ndt_resolve_real_dl
  popq %rdx
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  movq ndt_real_dlvsym(%rip), %rax
  testq %rax, %rax
  jz 2f
  jmp *%rax
2:
  xorl %eax, %eax
  ret
  .cfi_endproc
  .size dlvsym, .-dlvsym

  .section .note.GNU-stack,"",@progbits
