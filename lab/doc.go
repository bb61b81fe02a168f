// Package lab is the project's second wing: what proves the product and
// never ships in it. Beside the product packages (cmd/worker, cmd/enqueue,
// cmd/fleetctl, contract, worker, triton, audio, subtitle, enqueue, mps,
// fleet and the helpers of internal/), its rooms hold, by kind:
//
//	kit/      helpers any test may import: free ports, golden files, leak
//	          checks, the module root, process figures, shared memory,
//	          a concurrent buffer, waits, HCL formatting, WER, synthetic
//	          speech and conversations, the diarization scorer
//	servers/  real servers run for tests and their fakes: the local AWS
//	          servers (localaws), real Triton (tritonproc), the fake Triton
//	          and its KServe server (tritontest), the fault proxy
//	suites/   suites that drive the product end to end: chaos, the Triton
//	          conformance suite
//	bench/    every benchmark (make bench-...)
//	cmd/      drivers: the demo, the chaos runner, the mutation runner
//
// The rules, checked by the tests of this package: no package outside lab/
// imports one inside it, except from its tests, and those tests import
// only kit/ and servers/ (a suite, a benchmark or a driver is never a
// product test's helper); a room imports only the rooms before it in the
// list above (kit/ nothing of the lab, servers/ kit/, suites/ both, bench/
// and cmd/ any but cmd/), its tests as well; and the shipped binaries do
// not link the testing package.
package lab
