"""One Triton partition stand-in for the GPU benchmark: a KServe v2 gRPC
server speaking the project's proto and model I/O, with a dynamic batcher
of Triton's semantics (max batch size, preferred sizes, max queue delay,
identical shapes unless ragged, max queue size -> UNAVAILABLE "Exceeds
maximum queue size", queue timeout -> UNAVAILABLE "Request timeout
expired", priority levels), in front of the Parakeet-TDT-shaped stand-in
of model.py. It is a stand-in for measuring the serving system, not a
recogniser.

It writes cumulative batch statistics to --stats-file every half second.
"""
import argparse
import json
import os
import struct
import sys
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import torch
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import model as stand_in

HERE = os.path.dirname(os.path.abspath(__file__))


def load_messages():
    """Message classes from the proto's descriptor set (kserve.pb, made by
    `make proto`), so no generated Python code is needed and any protobuf
    runtime works."""
    fds = descriptor_pb2.FileDescriptorSet()
    with open(os.path.join(HERE, "kserve.pb"), "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    names = ["ServerLiveRequest", "ServerLiveResponse", "ServerReadyRequest", "ServerReadyResponse",
             "ModelReadyRequest", "ModelReadyResponse", "ModelMetadataRequest", "ModelMetadataResponse",
             "ModelInferRequest", "ModelInferResponse"]
    out = {}
    for n in names:
        desc = pool.FindMessageTypeByName("inference." + n)
        if hasattr(message_factory, "GetMessageClass"):
            out[n] = message_factory.GetMessageClass(desc)
        else:
            out[n] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return out


M = load_messages()


class Unavailable(Exception):
    pass


class Pending:
    __slots__ = ("rows", "lengths", "shape", "priority", "seq", "enqueued", "deadline", "done", "result", "error", "ctx")

    def __init__(self, rows, lengths, shape, priority, deadline, ctx):
        self.rows, self.lengths, self.shape, self.priority = rows, lengths, shape, priority
        self.deadline, self.ctx = deadline, ctx
        self.enqueued = time.monotonic()
        self.done = threading.Event()
        self.result = self.error = None
        self.seq = 0


class Batcher:
    def __init__(self, args, execute):
        self.max_batch = args.max_batch
        self.preferred = sorted(args.preferred)
        self.delay = args.max_queue_delay_us / 1e6
        self.max_queue = args.max_queue_size
        self.ragged = args.ragged
        self.default_timeout = args.default_timeout_us / 1e6
        self.execute = execute
        self.cv = threading.Condition()
        self.queue = []
        self.seq = 0
        self.batches = 0
        self.rows = 0
        self.sizes = {}
        self.busy_s = 0.0

    def submit(self, p, timeout):
        with self.cv:
            if self.max_queue and len(self.queue) >= self.max_queue:
                raise Unavailable("Exceeds maximum queue size")
            self.seq += 1
            p.seq = self.seq
            t = timeout or self.default_timeout
            p.deadline = p.enqueued + t if t else None
            self.queue.append(p)
            self.cv.notify_all()
        while not p.done.wait(0.05):
            if p.ctx is not None and not p.ctx.is_active():
                with self.cv:  # the client gave up: drop it if it still waits
                    if p in self.queue:
                        self.queue.remove(p)
                        return None
        if p.error:
            raise p.error
        return p.result

    def form(self):
        """Under the lock: a batch to run now, or the seconds to wait."""
        now = time.monotonic()
        keep = []
        for p in self.queue:
            if p.deadline is not None and now > p.deadline:
                p.error = Unavailable("Request timeout expired")
                p.done.set()
            else:
                keep.append(p)
        self.queue = keep
        if not self.queue:
            return None, None
        self.queue.sort(key=lambda p: (p.priority, p.seq))
        head = self.queue[0]
        picked, rows = [], 0
        for p in self.queue:
            if not self.ragged and p.shape != head.shape:
                continue
            if rows + len(p.rows) > self.max_batch:
                break
            picked.append(p)
            rows += len(p.rows)
        full = rows >= self.max_batch
        if not full:
            for size in reversed(self.preferred):
                s = 0
                for j, p in enumerate(picked):
                    s += len(p.rows)
                    if s == size:
                        picked, rows, full = picked[: j + 1], s, True
                        break
                if full:
                    break
        oldest = max(now - p.enqueued for p in picked)
        if not full and self.delay > 0 and oldest < self.delay:
            return None, self.delay - oldest
        for p in picked:
            self.queue.remove(p)
        self.batches += 1
        self.rows += rows
        self.sizes[rows] = self.sizes.get(rows, 0) + 1
        return picked, None

    def run(self):
        while True:
            with self.cv:
                batch, wait = self.form()
                while batch is None:
                    self.cv.wait(wait)
                    batch, wait = self.form()
            start = time.monotonic()
            try:
                results = self.execute([r for p in batch for r in p.rows], [n for p in batch for n in p.lengths])
                off = 0
                for p in batch:
                    p.result = results[off: off + len(p.rows)]
                    off += len(p.rows)
            except Exception as e:  # noqa: BLE001 - reported to every request of the batch
                for p in batch:
                    p.error = e
            self.busy_s += time.monotonic() - start
            for p in batch:
                p.done.set()

    def stats(self):
        with self.cv:
            return {"batches": self.batches, "rows": self.rows, "sizes": self.sizes, "busy_s": self.busy_s}


def encode_bytes(elems):
    out = bytearray()
    for e in elems:
        out += struct.pack("<I", len(e)) + e
    return bytes(out)


class Service:
    def __init__(self, args, batcher):
        self.args, self.batcher = args, batcher

    def live(self, req, ctx):
        return M["ServerLiveResponse"](live=True)

    def ready(self, req, ctx):
        return M["ServerReadyResponse"](ready=True)

    def model_ready(self, req, ctx):
        if req.name != self.args.model or req.version not in ("", "1"):
            ctx.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: '%s' is not found" % req.name)
        return M["ModelReadyResponse"](ready=True)

    def metadata(self, req, ctx):
        if req.name != self.args.model:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: '%s' is not found" % req.name)
        r = M["ModelMetadataResponse"](name=self.args.model, versions=["1"], platform="pytorch_standin")
        r.inputs.add(name="audio", datatype="FP32", shape=[-1, -1])
        r.outputs.add(name="text", datatype="BYTES", shape=[-1, 1])
        return r

    def infer(self, req, ctx):
        if req.model_name != self.args.model:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: '%s' is not found" % req.model_name)
        raw = req.raw_input_contents
        audio = lengths = None
        batch = 0
        for i, inp in enumerate(req.inputs):
            if len(inp.shape) != 2 or inp.shape[0] < 1 or inp.shape[0] > self.args.max_batch:
                ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "input '%s': shape %s needs a batch dimension of 1..%d" % (inp.name, list(inp.shape), self.args.max_batch))
            if batch and inp.shape[0] != batch:
                ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "inputs disagree on the batch size")
            batch = inp.shape[0]
            if inp.name == "audio":
                a = np.frombuffer(raw[i], dtype="<f4")
                if a.size != inp.shape[0] * inp.shape[1]:
                    ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "input 'audio': shape and contents disagree")
                audio = a.reshape(inp.shape[0], inp.shape[1])
            elif inp.name == "audio_length":
                lengths = [int(x) for x in np.frombuffer(raw[i], dtype="<i4")]
            elif inp.name == "timestamps":
                pass
            else:
                ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "unexpected inference input '%s'" % inp.name)
        if audio is None:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "missing input 'audio'")
        n = audio.shape[1]
        if lengths is None:
            lengths = [n] * batch
        priority = 0
        timeout = 0.0
        if "priority" in req.parameters:
            priority = req.parameters["priority"].uint64_param or req.parameters["priority"].int64_param
        if "timeout" in req.parameters:
            timeout = (req.parameters["timeout"].int64_param or req.parameters["timeout"].uint64_param) / 1e6
        prio = priority if priority else self.args.default_priority
        p = Pending(list(audio), lengths, n, prio, None, ctx)
        try:
            results = self.batcher.submit(p, timeout)
        except Unavailable as e:
            ctx.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        except Exception as e:  # noqa: BLE001
            ctx.abort(grpc.StatusCode.INTERNAL, "model: %s" % e)
        if results is None:
            ctx.abort(grpc.StatusCode.CANCELLED, "client gave up")
        resp = M["ModelInferResponse"](model_name=self.args.model, model_version="1", id=req.id)
        texts = [(" ".join("t%d" % t for t in toks)).encode() for toks in results]
        wanted = {o.name for o in req.outputs} or {"text", "num_words"}
        if "text" in wanted:
            resp.outputs.add(name="text", datatype="BYTES", shape=[batch, 1])
            resp.raw_output_contents.append(encode_bytes(texts))
        if "word_timestamps" in wanted:
            resp.outputs.add(name="word_timestamps", datatype="BYTES", shape=[batch, 0])
            resp.raw_output_contents.append(b"")
        if "num_words" in wanted:
            resp.outputs.add(name="num_words", datatype="INT32", shape=[batch, 1])
            resp.raw_output_contents.append(np.array([len(t) for t in results], dtype="<i4").tobytes())
        return resp


def handler(svc):
    def unary(fn, req_cls, resp_cls):
        return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=req_cls.FromString,
                                                   response_serializer=resp_cls.SerializeToString)
    return grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ServerLive": unary(svc.live, M["ServerLiveRequest"], M["ServerLiveResponse"]),
        "ServerReady": unary(svc.ready, M["ServerReadyRequest"], M["ServerReadyResponse"]),
        "ModelReady": unary(svc.model_ready, M["ModelReadyRequest"], M["ModelReadyResponse"]),
        "ModelMetadata": unary(svc.metadata, M["ModelMetadataRequest"], M["ModelMetadataResponse"]),
        "ModelInfer": unary(svc.infer, M["ModelInferRequest"], M["ModelInferResponse"]),
    })


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="asr")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tiny", action="store_true", help="tiny dimensions, for CPU tests")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--preferred", type=lambda s: [int(x) for x in s.split(",") if x], default=[8, 16, 32])
    ap.add_argument("--max-queue-delay-us", type=int, default=5000)
    ap.add_argument("--max-queue-size", type=int, default=256)
    ap.add_argument("--default-timeout-us", type=int, default=0)
    ap.add_argument("--default-priority", type=int, default=2)
    ap.add_argument("--ragged", action="store_true", help="batch requests of different lengths (allow_ragged_batch)")
    ap.add_argument("--stats-file", default="")
    ap.add_argument("--warmup-seconds", type=float, default=45)
    args = ap.parse_args()

    dtype = getattr(torch, args.dtype) if args.device != "cpu" else torch.float32
    cfg = stand_in.Config.tiny() if args.tiny else stand_in.Config()
    m = stand_in.build(cfg, args.device, dtype)

    def execute(rows, lengths):
        longest = max(max(len(r) for r in rows), 1)
        a = np.zeros((len(rows), longest), dtype=np.float32)
        for i, r in enumerate(rows):
            a[i, :len(r)] = r
        t = torch.from_numpy(a).to(args.device, non_blocking=True)
        ln = torch.tensor(lengths, device=args.device)
        toks, _ = m.transcribe(t, ln)
        return toks

    if args.warmup_seconds > 0:
        execute([np.random.randn(int(args.warmup_seconds * 16000)).astype(np.float32) * 0.1], [int(args.warmup_seconds * 16000)])

    batcher = Batcher(args, execute)
    threading.Thread(target=batcher.run, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max(64, 4 * args.max_batch)),
                         options=[("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)])
    server.add_generic_rpc_handlers((handler(Service(args, batcher)),))
    server.add_insecure_port("127.0.0.1:%d" % args.port)
    server.start()
    # What this process was given: its GPU and, under MPS, the SMs its
    # thread percentage leaves it (the cap applies in whole TPCs).
    gpu = {}
    if args.device != "cpu":
        gpu = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
               "thread_percentage": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""),
               "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    print(json.dumps({"msg": "serving", "port": args.port, "params": stand_in.parameters(m), "ragged": args.ragged, **gpu}), flush=True)

    def write_stats():
        while True:
            time.sleep(0.5)
            if args.stats_file:
                tmp = args.stats_file + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(batcher.stats(), f)
                os.replace(tmp, args.stats_file)
    threading.Thread(target=write_stats, daemon=True).start()
    server.wait_for_termination()


if __name__ == "__main__":
    sys.exit(main())
