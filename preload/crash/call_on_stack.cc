// CallOnStack (see call_on_stack.h): a few instructions of assembly, because C
// cannot move the stack pointer. rbp keeps the caller's stack across the call
// (callee-saved, so fn preserves it) and anchors the CFA for unwinders.
#include "preload/crash/call_on_stack.h"

// void flightrec::CallOnStack(fn=rdi, arg=rsi, stack_top=rdx)
asm(R"(
  .text
  .p2align 4
  .globl _ZN9flightrec11CallOnStackEPFvPvES0_m
  .hidden _ZN9flightrec11CallOnStackEPFvPvES0_m
  .type _ZN9flightrec11CallOnStackEPFvPvES0_m, @function
_ZN9flightrec11CallOnStackEPFvPvES0_m:
  .cfi_startproc
  pushq %rbp
  .cfi_def_cfa_offset 16
  .cfi_offset %rbp, -16
  movq %rsp, %rbp
  .cfi_def_cfa_register %rbp
  andq $-16, %rdx
  movq %rdx, %rsp
  movq %rdi, %rax
  movq %rsi, %rdi
  call *%rax
  movq %rbp, %rsp
  popq %rbp
  .cfi_def_cfa %rsp, 8
  ret
  .cfi_endproc
  .size _ZN9flightrec11CallOnStackEPFvPvES0_m, .-_ZN9flightrec11CallOnStackEPFvPvES0_m
)");
