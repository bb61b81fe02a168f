#include "textflag.h"

// func pcm16MonoAVX2(out []float32, data []byte)
//
// Eight samples a step: sign-extended to 32 bits, converted (exact) and
// scaled by 2^-15 (exact).
TEXT ·pcm16MonoAVX2(SB), NOSPLIT, $0-48
	MOVQ         out_base+0(FP), DI
	MOVQ         out_len+8(FP), CX
	MOVQ         data_base+24(FP), SI
	MOVL         $0x38000000, AX // 2^-15 as float32
	VMOVD        AX, X3
	VBROADCASTSS X3, Y3

by8:
	CMPQ      CX, $8
	JB        done
	VPMOVSXWD (SI), Y0
	VCVTDQ2PS Y0, Y0
	VMULPS    Y3, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       by8

done:
	VZEROUPPER
	RET

// func pcm16StereoAVX2(out []float32, data []byte) (eL, eR, eS int64)
//
// Eight frames a step: each frame's l+r (exact in 32 bits) converted and
// scaled by 2^-16 into out, and the sums of l², r² and (l+r)² in 64-bit
// lanes (VPMULDQ squares the even 32-bit lanes; the odd ones are shifted
// down first).
TEXT ·pcm16StereoAVX2(SB), NOSPLIT, $0-72
	MOVQ         out_base+0(FP), DI
	MOVQ         out_len+8(FP), CX
	MOVQ         data_base+24(FP), SI
	MOVL         $0x37800000, AX // 2^-16 as float32
	VMOVD        AX, X3
	VBROADCASTSS X3, Y3
	VPXOR        Y8, Y8, Y8
	VPXOR        Y9, Y9, Y9
	VPXOR        Y10, Y10, Y10

by8:
	CMPQ      CX, $8
	JB        sums
	VPMOVSXWD (SI), Y0   // l0 r0 l1 r1 l2 r2 l3 r3
	VPMOVSXWD 16(SI), Y1 // frames 4 to 7
	VPHADDD   Y1, Y0, Y2 // m0 m1 m4 m5 m2 m3 m6 m7
	VPERMQ    $0xD8, Y2, Y2
	VCVTDQ2PS Y2, Y4
	VMULPS    Y3, Y4, Y4
	VMOVUPS   Y4, (DI)

	VPMULDQ Y0, Y0, Y5
	VPADDQ  Y5, Y8, Y8
	VPSRLQ  $32, Y0, Y6
	VPMULDQ Y6, Y6, Y6
	VPADDQ  Y6, Y9, Y9
	VPMULDQ Y1, Y1, Y5
	VPADDQ  Y5, Y8, Y8
	VPSRLQ  $32, Y1, Y6
	VPMULDQ Y6, Y6, Y6
	VPADDQ  Y6, Y9, Y9
	VPMULDQ Y2, Y2, Y5
	VPADDQ  Y5, Y10, Y10
	VPSRLQ  $32, Y2, Y6
	VPMULDQ Y6, Y6, Y6
	VPADDQ  Y6, Y10, Y10

	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  by8

sums:
	VEXTRACTI128 $1, Y8, X1
	VPADDQ       X1, X8, X8
	VPSHUFD      $0x4E, X8, X1
	VPADDQ       X1, X8, X8
	VMOVQ        X8, AX
	MOVQ         AX, eL+48(FP)
	VEXTRACTI128 $1, Y9, X1
	VPADDQ       X1, X9, X9
	VPSHUFD      $0x4E, X9, X1
	VPADDQ       X1, X9, X9
	VMOVQ        X9, AX
	MOVQ         AX, eR+56(FP)
	VEXTRACTI128 $1, Y10, X1
	VPADDQ       X1, X10, X10
	VPSHUFD      $0x4E, X10, X1
	VPADDQ       X1, X10, X10
	VMOVQ        X10, AX
	MOVQ         AX, eS+64(FP)
	VZEROUPPER
	RET
