#include "textflag.h"

// func dotFMA(a, b []float32) float32
//
// Four 8-lane accumulators over 32 floats a step, then one over 8, then
// the lanes summed and the last few floats added one at a time.
TEXT ·dotFMA(SB), NOSPLIT, $0-52
	MOVQ a_base+0(FP), SI
	MOVQ a_len+8(FP), CX
	MOVQ b_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

by32:
	CMPQ CX, $32
	JB   by8
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         by32

by8:
	CMPQ CX, $8
	JB   lanes
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         by8

lanes:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0

by1:
	TESTQ CX, CX
	JZ    done
	VMOVSS      (SI), X1
	VFMADD231SS (DI), X1, X0
	ADDQ        $4, SI
	ADDQ        $4, DI
	DECQ        CX
	JMP         by1

done:
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dot2FMA(a0, b0, a1, b1 []float32) (s0, s1 float32)
//
// dotFMA of (a0, b0) and of (a1, b1) at once, each summed in exactly
// dotFMA's order (so each result is bit for bit dotFMA's), the two chains
// interleaved to hide the latency of each. The lengths are equal and a
// multiple of 8.
TEXT ·dot2FMA(SB), NOSPLIT, $0-104
	MOVQ a0_base+0(FP), SI
	MOVQ a0_len+8(FP), CX
	MOVQ b0_base+24(FP), DI
	MOVQ a1_base+48(FP), R8
	MOVQ b1_base+72(FP), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

pair32:
	CMPQ CX, $32
	JB   pair8
	VMOVUPS     (SI), Y8
	VMOVUPS     32(SI), Y9
	VMOVUPS     64(SI), Y10
	VMOVUPS     96(SI), Y11
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y9, Y1
	VFMADD231PS 64(DI), Y10, Y2
	VFMADD231PS 96(DI), Y11, Y3
	VMOVUPS     (R8), Y12
	VMOVUPS     32(R8), Y13
	VMOVUPS     64(R8), Y14
	VMOVUPS     96(R8), Y15
	VFMADD231PS (R9), Y12, Y4
	VFMADD231PS 32(R9), Y13, Y5
	VFMADD231PS 64(R9), Y14, Y6
	VFMADD231PS 96(R9), Y15, Y7
	ADDQ        $128, SI
	ADDQ        $128, DI
	ADDQ        $128, R8
	ADDQ        $128, R9
	SUBQ        $32, CX
	JMP         pair32

pair8:
	CMPQ CX, $8
	JB   pairsum
	VMOVUPS     (SI), Y8
	VFMADD231PS (DI), Y8, Y0
	VMOVUPS     (R8), Y12
	VFMADD231PS (R9), Y12, Y4
	ADDQ        $32, SI
	ADDQ        $32, DI
	ADDQ        $32, R8
	ADDQ        $32, R9
	SUBQ        $8, CX
	JMP         pair8

pairsum:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y5, Y4, Y4
	VADDPS       Y3, Y2, Y2
	VADDPS       Y7, Y6, Y6
	VADDPS       Y2, Y0, Y0
	VADDPS       Y6, Y4, Y4
	VEXTRACTF128 $1, Y0, X1
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X1, X0, X0
	VADDPS       X5, X4, X4
	VHADDPS      X0, X0, X0
	VHADDPS      X4, X4, X4
	VHADDPS      X0, X0, X0
	VHADDPS      X4, X4, X4
	VZEROUPPER
	MOVSS        X0, s0+96(FP)
	MOVSS        X4, s1+100(FP)
	RET
