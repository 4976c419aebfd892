#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses (tests/fuzz/corpus/<harness>/): valid
messages of every kind LayerPS sends, in each harness's input layout (see the harness
files). Protobuf seeds are encoded with protoc from text format; the placement
harnesses' seeds (plan_json_fuzz, profile_json_fuzz) are files layerps-plan writes
(--write_plan, --write_profile), from $LAYERPS_PLAN or build/tools/layerps-plan (skipped,
with a note, when there is none). Run from anywhere; the output is checked in, so run it
again only when the wire format or the placement JSON format changes."""
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus")

MAGIC, VERSION = 0x3153504C, 2
CONTROL, PUSH, PULL, PUSHPULL, ASSIGN, REPLY, PEER = 1, 2, 3, 4, 5, 6, 7
SPARSE, FUSED = 1, 2


def header(type_, table=0, count=0, dim=0, flags=0, offset=0, status=0, sender=3, epoch=5,
           request_id=7, part=0):
    return struct.pack("<IHHIIQQQQIiII", MAGIC, VERSION, type_, sender, table, request_id, epoch,
                       offset, count, dim, status, flags, part)


def frames(*fs):
    return b"".join(struct.pack("<I", len(f)) + f for f in fs)


def floats(n, v=0.5):
    return struct.pack("<%df" % n, *([v] * n))


def keys(ks):
    return struct.pack("<%dQ" % len(ks), *ks)


def segments(segs):
    return b"".join(struct.pack("<IIQQ", t, 0, off, n) for t, off, n in segs)


def sparse_segments(segs):
    """Fused sparse segments: (table, dim, keys)."""
    return b"".join(struct.pack("<IIQ", t, d, n) for t, d, n in segs)


def data_messages():
    k = [1, 2, 3, 10, 99]
    return {
        "dense_push": header(PUSH, 0, 4, offset=256) + frames(floats(4)),
        "dense_pull": header(PULL, 0, 512, offset=256),
        "dense_pushpull": header(PUSHPULL, 2, 100) + frames(floats(100)),
        "dense_assign": header(ASSIGN, 0, 8, offset=300) + frames(floats(8, 2.0)),
        "sparse_push": header(PUSH, 1, len(k), 4, SPARSE) + frames(keys(k), floats(4 * len(k))),
        "sparse_pull": header(PULL, 1, len(k), 4, SPARSE) + frames(keys(k)),
        "sparse_pushpull": header(PUSHPULL, 1, 2, 4, SPARSE) + frames(keys([5, 5]), floats(8)),
        "fused_push": header(PUSH, 0, 2, flags=FUSED)
        + frames(segments([(0, 256, 10), (2, 0, 100)]), floats(110)),
        "fused_pull": header(PULL, 0, 2, flags=FUSED) + frames(segments([(0, 300, 5), (2, 90, 10)])),
        # request_fuzz's sparse table 1 (dim 4; keys 3, 10, 99 route to its half) and
        # bounded table 3 (dim 2, all keys).
        "fused_sparse_push": header(PUSH, 0, 2, flags=SPARSE | FUSED)
        + frames(sparse_segments([(1, 4, 3), (3, 2, 2)]), keys([3, 10, 99, 1, 2]),
                 floats(3 * 4 + 2 * 2)),
        "fused_sparse_pull": header(PULL, 0, 2, flags=SPARSE | FUSED)
        + frames(sparse_segments([(3, 2, 3), (1, 4, 2)]), keys([5, 6, 5, 3, 10])),
        "reply_values": header(REPLY, 0, 4) + frames(floats(4)),
        "reply_error": header(REPLY, 0, 4, status=5) + frames(b"table 0 is not held"),
        "peer_tensor": header(PEER, 0xFFFFFFFF, 6, offset=42) + frames(floats(6)),
        "control": header(CONTROL) + frames(b"\x0a\x00"),
    }


def manifests():
    name = b"/layerps-shm-1234-0"

    def manifest(entries):
        head = struct.pack("<QII", 0x31304D4853535046, len(entries), 0) + name.ljust(56, b"\0")
        return head + b"".join(struct.pack("<IIQQ", *e) for e in entries)

    return {
        # n frames, their sizes (0: empty part), then the manifest
        "one": bytes([1, 0]) + manifest([(0, 0, 0, 65536)]),
        "two_of_three": bytes([3, 0, 9, 0]) + manifest([(0, 5, 0, 70000), (2, 6, 70016, 1 << 20)]),
        "end_of_ring": bytes([1, 0]) + manifest([(0, 4095, (128 << 20) - 65536, 65536)]),
    }


def replies():
    """reply_fuzz records: [selector][mode][index][value][u16 length][frames]. The parts'
    value counts are not known here (the sparse split depends on the key hash), so each
    seed answers one part with a frame of every size the requests can ask for."""
    sizes = [512, 488, 300, 40, 3, 6, 9, 12]

    def record(selector, mode, frames_bytes, index=0, value=0):
        return bytes([selector, mode, index, value]) + struct.pack("<H", len(frames_bytes)) + frames_bytes

    out = {}
    for sel in range(10):
        out["part%d" % sel] = b"".join(record(sel, 0, frames(floats(n))) for n in sizes)
    out["error_replies"] = b"".join(record(sel, 1, frames(b"server out of memory"), value=8)
                                    for sel in range(10))
    out["flipped_counts"] = b"".join(record(sel, 2, frames(floats(40)), index=40, value=1)
                                     for sel in range(10))
    return out


def protoc_encode(message_type, text):
    proto_dir = os.path.join(ROOT, "proto")
    return subprocess.run(["protoc", "--encode=layerps.pb." + message_type, "-I", proto_dir,
                           os.path.join(proto_dir, "layerps.proto")], input=text.encode(),
                          check=True, capture_output=True).stdout


MAP = """
epoch: 7
nodes { id: 0 role: SCHEDULER endpoint: "tcp://127.0.0.1:5000" alive: true }
nodes { id: 1 role: SERVER rank: 0 endpoint: "tcp://127.0.0.1:5001" alive: true tag: "a1b2" }
nodes { id: 2 role: SERVER rank: 1 endpoint: "tcp://127.0.0.1:5002" alive: true tag: "c3d4" }
nodes { id: 3 role: WORKER rank: 0 endpoint: "ipc:///tmp/w.sock" alive: true tag: "e5f6" }
tables { id: 0 spec { name: "w" kind: 0 size: 1000 rule: 1 learning_rate: 0.1 layer: "fc" }
         ranges { begin: 0 end: 2 server: 1 } ranges { begin: 2 end: 4 server: 2 } chunk_elems: 256 }
tables { id: 1 spec { name: "emb" kind: 1 dim: 8 rule: 5 learning_rate: 0.01 beta1: 0.9 beta2: 0.999 epsilon: 1e-8 init: 1 init_a: -0.1 init_b: 0.1 seed: 3 }
         ranges { begin: 0 end: 9223372036854775808 server: 1 } ranges { begin: 9223372036854775808 end: 0 server: 2 } }
placement { layer: "fc" server_ranks: 0 server_ranks: 1 }
"""

CONTROLS = {
    "register": 'register { token: "t" role: WORKER endpoint: "tcp://127.0.0.1:6000" hostname: "h" requested_rank: -1 session: "0123456789abcdef0123" }',
    "declare_dense": 'declare_table { request_id: 1 spec { name: "w" kind: 0 size: 1000000 rule: 1 learning_rate: 0.1 } }',
    "declare_sparse": 'declare_table { request_id: 2 spec { name: "e" kind: 1 dim: 16 rule: 6 learning_rate: 0.1 l1: 0.1 l2: 0.1 ftrl_beta: 1 layer: "emb" } }',
    "map_ack": "map_ack { epoch: 2 }",
    "map_ack_failed": 'map_ack { epoch: 2 failed { table: 0 error: "out of memory" } }',
    "barrier": "barrier { request_id: 3 group: 1 }",
    "barrier_all": "barrier { request_id: 4 group: 3 }",
    "placement": 'install_placement { request_id: 5 layers { layer: "fc" server_ranks: 1 } layers { layer: "emb" server_ranks: 0 server_ranks: 1 } }',
    "leave": "leave {}",
    "heartbeat": "heartbeat {}",
    "map_update": "map_update { map { %s } }" % MAP,
}


# The docs' hand-written profile (docs/placement.md, "Model profile") and a residual
# block (a DAG with branches: cut points only around it) next to the built-ins.
MLP_PROFILE = b"""{
  "format": "layerps.model_profile",
  "version": 1,
  "name": "mlp",
  "input_bytes_per_sample": 3136,
  "layers": [
    {"name": "fc1", "kind": "fc", "param_bytes": 803840, "flops_per_sample": 401408,
     "activation_bytes": 1024, "inputs": [], "tables": ["fc1.weight", "fc1.bias"],
     "shape": {"in_channels": 784, "in_height": 1, "in_width": 1, "out_channels": 256,
               "out_height": 1, "out_width": 1}},
    {"name": "fc2", "kind": "fc", "param_bytes": 10280, "flops_per_sample": 5120,
     "activation_bytes": 40, "inputs": ["fc1"]}
  ]
}
"""
RESIDUAL_PROFILE = b"""{"name": "residual", "input_bytes_per_sample": 12288, "layers": [
  {"name": "stem", "kind": "conv", "param_bytes": 7168, "flops_per_sample": 1.8e6,
   "activation_bytes": 65536, "shape": {"in_channels": 3, "in_height": 32, "in_width": 32,
   "out_channels": 16, "out_height": 32, "out_width": 32, "kernel_h": 3, "kernel_w": 3,
   "stride": 1, "padding": 1}},
  {"name": "a", "kind": "conv", "param_bytes": 9280, "flops_per_sample": 4.7e6,
   "activation_bytes": 65536, "inputs": ["stem"]},
  {"name": "b", "kind": "norm", "param_bytes": 128, "activation_bytes": 65536, "inputs": ["a"]},
  {"name": "add", "kind": "other", "activation_bytes": 65536, "inputs": ["b", "stem"]},
  {"name": "pool", "kind": "pool", "activation_bytes": 64, "inputs": ["add"],
   "shape": {"kernel_h": 32, "kernel_w": 1, "stride": 32, "padding_w": 0}},
  {"name": "head", "kind": "fc", "param_bytes": 680, "flops_per_sample": 320,
   "activation_bytes": 40, "inputs": ["pool"], "tables": ["head.weight", "head.bias"]}]}
"""


def placement_files():
    """{harness: {name: bytes}} of the placement harnesses, or None without layerps-plan."""
    tool = os.environ.get("LAYERPS_PLAN", os.path.join(ROOT, "build", "tools", "layerps-plan"))
    if not os.access(tool, os.X_OK):
        print("make_seeds: no layerps-plan at %s (set LAYERPS_PLAN): placement seeds skipped"
              % tool, file=sys.stderr)
        return None
    import tempfile
    out = {"plan_json_fuzz": {}, "profile_json_fuzz": {"mlp": MLP_PROFILE,
                                                       "residual": RESIDUAL_PROFILE}}
    with tempfile.TemporaryDirectory() as tmp:
        def run(harness, name, flag, *args):
            path = os.path.join(tmp, name)
            subprocess.run([tool, *args, "--layers=false", flag + "=" + path], check=True,
                           stdout=subprocess.DEVNULL)
            with open(path, "rb") as f:
                out[harness][name] = f.read()
        for model in ("bigfc", "alexnet"):
            run("profile_json_fuzz", model, "--write_profile", "--model=" + model,
                "--strategy=uniform")
        small = ["--model=bigfc", "--workers=2", "--servers=2"]
        for strategy in ("uniform", "park", "stanza"):  # ps; on_server; fc_node layers
            run("plan_json_fuzz", "bigfc_" + strategy, "--write_plan", *small,
                "--strategy=" + strategy)
        # An OptCNN execution plan: channel-parallel FC nodes, each layer's "config".
        run("plan_json_fuzz", "bigfc_optcnn_owt", "--write_plan", *small, "--strategy=optcnn",
            "--optcnn_run=owt")
        run("plan_json_fuzz", "alexnet_park", "--write_plan", "--model=alexnet", "--workers=4",
            "--servers=2", "--strategy=park")
    return out


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    for name, data in data_messages().items():
        write("header_fuzz", name, data)
        write("request_fuzz", name, data)
    for name, data in replies().items():
        write("reply_fuzz", name, data)
    for name, data in manifests().items():
        write("shm_manifest_fuzz", name, data)
    write("map_codec_fuzz", "map", protoc_encode("ClusterMap", MAP))
    encoded = {n: protoc_encode("Control", t) for n, t in CONTROLS.items()}

    def seq(*items):  # the control harness's layout: sender, u16 length, Control bytes
        return b"".join(bytes([s]) + struct.pack("<H", len(encoded[n])) + encoded[n] for s, n in items)

    for name in encoded:
        write("control_fuzz", name, seq((2, name)))
    # A declare acknowledged by every node, then a barrier of both workers.
    write("control_fuzz", "declare_then_acks",
          seq((2, "declare_dense"), (0, "map_ack"), (1, "map_ack"), (2, "map_ack"), (3, "map_ack"),
              (2, "barrier"), (3, "barrier")))
    write("control_fuzz", "placement_then_declare",
          seq((2, "placement"), (3, "declare_sparse"), (0, "map_ack_failed"), (3, "leave")))
    for harness, files in (placement_files() or {}).items():
        for name, data in files.items():
            write(harness, name, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
