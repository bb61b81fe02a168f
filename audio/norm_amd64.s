#include "textflag.h"

// func energyMaxAVX2(x []float32) (sum float32, maxBits uint32)
//
// The sum of squares (two 8-lane accumulators) and the largest |sample|
// as float bits (sign cleared, compared as unsigned integers, as the Go
// loop does); len(x) is a multiple of 8.
TEXT ·energyMaxAVX2(SB), NOSPLIT, $0-32
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	VPXOR        Y4, Y4, Y4
	VPXOR        Y5, Y5, Y5
	MOVL         $0x7fffffff, AX
	VMOVD        AX, X7
	VPBROADCASTD X7, Y7

by16:
	CMPQ        CX, $16
	JB          by8
	VMOVUPS     (SI), Y8
	VMOVUPS     32(SI), Y9
	VFMADD231PS Y8, Y8, Y0
	VFMADD231PS Y9, Y9, Y1
	VPAND       Y7, Y8, Y8
	VPAND       Y7, Y9, Y9
	VPMAXUD     Y8, Y4, Y4
	VPMAXUD     Y9, Y5, Y5
	ADDQ        $64, SI
	SUBQ        $16, CX
	JMP         by16

by8:
	CMPQ        CX, $8
	JB          done
	VMOVUPS     (SI), Y8
	VFMADD231PS Y8, Y8, Y0
	VPAND       Y7, Y8, Y8
	VPMAXUD     Y8, Y4, Y4
	ADDQ        $32, SI
	SUBQ        $8, CX
	JMP         by8

done:
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VPMAXUD      Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPMAXUD      X5, X4, X4
	VPSHUFD      $0x4E, X4, X5
	VPMAXUD      X5, X4, X4
	VPSHUFD      $0xB1, X4, X5
	VPMAXUD      X5, X4, X4
	VMOVD        X4, AX
	VZEROUPPER
	MOVSS        X0, sum+24(FP)
	MOVL         AX, maxBits+28(FP)
	RET

// func scaleAVX2(x []float32, gain float32)
//
// x[i] *= gain, eight at a time; len(x) is a multiple of 8.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-28
	MOVQ         x_base+0(FP), SI
	MOVQ         x_len+8(FP), CX
	MOVSS        gain+24(FP), X1
	VBROADCASTSS X1, Y1

by8:
	CMPQ    CX, $8
	JB      done
	VMULPS  (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     by8

done:
	VZEROUPPER
	RET
