// Package lab is the project's second wing: what proves the product and
// never ships in it. Beside the product packages (cmd/worker, cmd/enqueue,
// contract, worker, triton, audio, subtitle, enqueue, mps, fleet and the
// helpers of internal/), lab/ holds the fake Triton and its KServe server
// (tritontest), the conformance suite, the real-Triton runner (tritonproc),
// the local AWS servers (localaws), the chaos suite, the demo driver, every
// benchmark (bench/) and the helpers only they and the tests use.
//
// The rule, checked by TestNothingShippedImportsTheLab: no package outside
// lab/ imports one inside it, except from its tests, and the shipped
// binaries do not link the testing package.
package lab
