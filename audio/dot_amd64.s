#include "textflag.h"

// The resampler's inner products. Every output is one 8-lane accumulator
// over whole 8-float blocks (rows are padded to a multiple of 8 taps),
// fused multiply-adds in block order, then its lanes summed as
// ((0+1)+(2+3))+((4+5)+(6+7)): dot1FMA and each output of dot4FMA give
// the same bits, so which outputs go four at a time (it depends on where
// a stream's blocks end) changes nothing.

// func dot1FMA(a, b *float32, n int) float32
TEXT ·dot1FMA(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	SHLQ   $2, CX
	XORQ   AX, AX
	VXORPS Y0, Y0, Y0

one:
	CMPQ        AX, CX
	JAE         onesum
	VMOVUPS     (SI)(AX*1), Y1
	VFMADD231PS (DI)(AX*1), Y1, Y0
	ADDQ        $32, AX
	JMP         one

onesum:
	VHADDPS      Y0, Y0, Y0 // (0+1) (2+3) . . | (4+5) (6+7) . .
	VHADDPS      Y0, Y0, Y0 // (0+1)+(2+3) . . . | (4+5)+(6+7) . . .
	VEXTRACTF128 $1, Y0, X1
	VADDSS       X1, X0, X0
	VZEROUPPER
	MOVSS        X0, ret+24(FP)
	RET

// func dot4FMA(a0, a1, a2, a3, b0, b1, b2, b3 *float32, n int, out *[4]float32)
//
// Four outputs at once: four independent chains hide the latency of each
// fused multiply-add, and their lanes are summed together.
TEXT ·dot4FMA(SB), NOSPLIT, $0-80
	MOVQ   a0+0(FP), R8
	MOVQ   a1+8(FP), R9
	MOVQ   a2+16(FP), R10
	MOVQ   a3+24(FP), R11
	MOVQ   b0+32(FP), R12
	MOVQ   b1+40(FP), R13
	MOVQ   b2+48(FP), SI
	MOVQ   b3+56(FP), DI
	MOVQ   n+64(FP), CX
	SHLQ   $2, CX
	XORQ   AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

four:
	CMPQ        AX, CX
	JAE         foursum
	VMOVUPS     (R8)(AX*1), Y4
	VMOVUPS     (R9)(AX*1), Y5
	VMOVUPS     (R10)(AX*1), Y6
	VMOVUPS     (R11)(AX*1), Y7
	VFMADD231PS (R12)(AX*1), Y4, Y0
	VFMADD231PS (R13)(AX*1), Y5, Y1
	VFMADD231PS (SI)(AX*1), Y6, Y2
	VFMADD231PS (DI)(AX*1), Y7, Y3
	ADDQ        $32, AX
	JMP         four

foursum:
	VHADDPS      Y1, Y0, Y4 // a(0+1) a(2+3) b(0+1) b(2+3) | a(4+5) a(6+7) b(4+5) b(6+7)
	VHADDPS      Y3, Y2, Y5 // the same for c and d
	VHADDPS      Y5, Y4, Y6 // a(0..3) b(0..3) c(0..3) d(0..3) | a(4..7) b(4..7) c(4..7) d(4..7)
	VEXTRACTF128 $1, Y6, X7
	VADDPS       X7, X6, X6
	MOVQ         out+72(FP), AX
	VMOVUPS      X6, (AX)
	VZEROUPPER
	RET
