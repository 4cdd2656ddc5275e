#!/usr/bin/env python3
"""Makes fuzz/corpus/<target>/ from the repository's own fixtures and shared/{traces,upstream}.

Seeds are kept small (AFL++ mutates small inputs far faster): a large trace gives its header and
first rows, Philly's JSON array its first records, and no seed is over 64 KiB. Run from the
repository root: `python3 fuzz/make_corpus.py [SHARED_DIR]` (default ../shared, then
/work/shared). Re-running replaces the corpus. The committed `hub` and `crd` corpora are not
what it made but campaigns minimised (`scripts/fuzz -m`: its seeds and what runs found, cut by
afl-cmin to the inputs that keep their coverage), so a run on another machine starts where the
last one ended; re-run this only to start those afresh.
"""

import json
import os
import pathlib
import shutil
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
CAP = 64 * 1024


def shared_dir():
    for d in sys.argv[1:] + [str(ROOT.parent / "shared"), "/work/shared"]:
        if (pathlib.Path(d) / "traces").is_dir():
            return pathlib.Path(d)
    sys.exit("make_corpus: no shared/ with traces/ found; name it as the first argument")


SHARED = shared_dir()


def without_descriptions(yaml_text):
    """A CRD without its `description` fields (and comment lines): the schema, its types and
    its CEL rules stay, at a third of the bytes or less. Every mutation of a CRD seed is parsed
    as YAML first, so its size sets the `crd` target's speed."""
    out, skip_deeper_than = [], None
    for line in yaml_text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        if skip_deeper_than is not None:
            if line.strip() == "" or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        stripped = line.lstrip(" ")
        if stripped.startswith("#"):
            continue
        # (A description that opens a list item, `- description:`, stays: the item needs it.)
        if stripped.startswith("description:"):
            skip_deeper_than = indent
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= CAP, (target, name, len(data))
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def head(path, lines):
    """The first `lines` lines of a text file (the header included), at most CAP bytes."""
    out = []
    size = 0
    with open(path, "rb") as f:
        for i, line in enumerate(f):
            if i >= lines or size + len(line) > CAP:
                break
            out.append(line)
            size += len(line)
    return b"".join(out)


def read(path):
    data = pathlib.Path(path).read_bytes()
    assert len(data) <= CAP, (path, len(data))
    return data


def trace():
    t = SHARED / "traces"
    put("trace", "native-philly.csv", head(ROOT / "simulator/data/philly-2017-sep-oct.csv", 40))
    # Native JSON Lines: the same jobs as the CSV's first rows, in the JSONL shape native.rs reads.
    put(
        "trace",
        "native.jsonl",
        '{"id": "train-1", "submit_s": 0, "duration_s": 3600, "pods": 4, "gpus_per_pod": 8, "topology": "required:rack"}\n'
        '{"id": "eval-7", "submit_s": 120.5, "duration_s": 600, "gpus_per_pod": 1, "gpu_flavor": "h100|a100",'
        ' "queue": "research", "priority": 10, "cpu_milli": 32000, "memory_mib": 262144}\n',
    )
    jobs = json.loads((t / "philly-2017/jobs_2017-09_2017-10.json").read_text())
    put("trace", "philly-jobs.json", json.dumps(jobs[:6], indent=4))
    put("trace", "philly-jobs-one.json", json.dumps(jobs[:1]))
    put("trace", "openb-pods-default.csv", head(t / "alibaba-gpu-v2023-openb/openb_pod_list_default.csv", 40))
    # gpuspec33: rows naming GPU models (the first rows have none).
    lines = (t / "alibaba-gpu-v2023-openb/openb_pod_list_gpuspec33.csv").read_bytes().splitlines(True)
    named = [l for l in lines[1:] if b",," not in l][:30]
    put("trace", "openb-pods-gpuspec.csv", lines[0] + b"".join(named))
    put("trace", "philly-revised-machines.csv", head(t / "philly-2017/revised_machine_list.csv", 40))
    put("trace", "philly-cluster-machines", head(t / "philly-2017/cluster_machine_list", 40))
    put("trace", "openb-nodes-gpu.csv", head(t / "alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv", 40))
    put("trace", "openb-nodes-all.csv", head(t / "alibaba-gpu-v2023-openb/openb_node_list_all_node.csv", 40))
    # Other public CSVs: not formats the loaders take, so their error paths.
    put("trace", "philly-runtime.csv", head(t / "philly-2017/philly_runtime.csv", 20))
    put("trace", "dlrm.csv", head(t / "alibaba-gpu-v2025-dlrm/disaggregated_DLRM_trace.csv", 20))
    put("trace", "spot-nodes.csv", head(t / "alibaba-v2026-spot-gpu/node_info_df.csv", 20))
    put("trace", "helios-summary.csv", read(t / "helios-2020/helios_cluster_summary.csv"))
    put("trace", "acme-summary.csv", read(t / "acme-2023/cluster_summary.csv"))


def fleet():
    put("fleet", "default-fleet.yaml", read(ROOT / "simulator/data/default-fleet.yaml"))
    put("fleet", "dev-fleet.yaml", read(ROOT / "playground/dev-fleet.yaml"))
    # The issue's bad fleets, as seeds to mutate from: a node count past the limit, and fanouts
    # whose product overflowed.
    put(
        "fleet",
        "huge-nodes.yaml",
        "clusters:\n- name: a\n  topology: []\n  pools:\n  - {name: p, gpus_per_node: 8, cpu_cores: 64, memory_gib: 512, nodes: 4000000000}\n",
    )
    put(
        "fleet",
        "fanout.yaml",
        "clusters:\n- name: a\n  topology:\n  - {level: block, label: b}\n  - {level: rack, label: r}\n"
        "  pools:\n  - name: p\n    gpu_flavor: h100\n    gpus_per_node: 8\n    cpu_cores: 64\n    memory_gib: 512\n    nodes: 64\n"
        "    fanout: {block: 4294967295, rack: 4294967295}\n",
    )
    put("fleet", "alias.yaml", "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nclusters: [*c]\n")


def render():
    runtimes = ROOT / "upstream/trainer/runtimes"
    torch = (runtimes / "torch_distributed.yaml").read_text()
    placement = (
        "apiVersion: stowage.dev/v1alpha1\nkind: Placement\nmetadata: {name: demo, namespace: ml}\nspec:\n"
        "  trainJobUid: 0b6f9a3e-0000-4000-8000-000000000001\n  cluster: east-h100\n  epoch: 2\n  podSets:\n"
        "  - {name: node, count: 2, flavor: nvidia-h100-80gb, required: true,\n"
        "     domain: {level: rack, nodeLabel: cloud.google.com/gce-topology-subblock, value: h100-b0-r1}}\n"
    )
    for ex in ["single-node", "torch-rack", "too-big"]:
        put("render", f"{ex}+torch.yaml", (ROOT / f"examples/{ex}.yaml").read_text() + "---\n" + torch)
    put(
        "render",
        "torch-rack+torch+placement.yaml",
        (ROOT / "examples/torch-rack.yaml").read_text() + "---\n" + torch + "---\n" + placement,
    )
    ds = (runtimes / "deepspeed_distributed.yaml").read_text()
    put("render", "mpi+deepspeed.yaml", (ROOT / "examples/mpi.yaml").read_text() + "---\n" + ds)
    up = SHARED / "upstream/trainer/runtimes"
    files = sorted(p for p in up.rglob("*.yaml"))
    for rt in files:
        text = rt.read_text()
        name = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("  name:")), "torch")
        extra = ""
        if "initializer" in text:
            extra = (
                "  initializer:\n    dataset: {storageUri: 'hf://tatsu-lab/alpaca'}\n"
                "    model: {storageUri: 'hf://meta-llama/Llama-3.2-1B-Instruct', secretRef: {name: hf-token}}\n"
            )
        job = (
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n"
            "metadata: {name: job-1, namespace: team-a, uid: 3f2c0d6e-1111-2222-3333-444455556666}\n"
            f"spec:\n  runtimeRef: {{name: {name}}}\n  trainer:\n    numNodes: 3\n"
            "    resourcesPerNode: {requests: {cpu: '8', memory: 64Gi, nvidia.com/gpu: '8'}, limits: {nvidia.com/gpu: '8'}}\n"
            "    env: [{name: LR, value: '0.001'}]\n" + extra
        )
        put("render", f"job+{rt.relative_to(up).as_posix().replace('/', '-')}", job + "---\n" + text)
    # A namespaced TrainingRuntime.
    put(
        "render",
        "single-node+namespaced-runtime.yaml",
        (ROOT / "examples/single-node.yaml").read_text().replace("name: torch-distributed", "name: torch-distributed\n    kind: TrainingRuntime")
        + "---\n"
        + torch.replace("kind: ClusterTrainingRuntime", "kind: TrainingRuntime").replace(
            "metadata:\n", "metadata:\n  namespace: default\n", 1
        ),
    )
    shutil.rmtree(CORPUS / "render_manifest", ignore_errors=True)
    shutil.copytree(CORPUS / "render", CORPUS / "render_manifest")


# The hub target's first two bytes: the operation (with encoding) and the selector (user,
# subresource, type); see `stowage_fuzz::hub`.
CREATE_JSON, CREATE_YAML, CREATE_PB, UPDATE_JSON, UPDATE_YAML = 0, 1, 2, 3, 4
MERGE, JSONPATCH, STRATEGIC, APPLY, LIST = 6, 7, 8, 9, 12


def crd():
    """CustomResourceDefinitions for the `crd` target: the first byte picks YAML (bit 0)."""
    crds = sorted((SHARED / "upstream").rglob("*.yaml"))
    for c in [c for c in crds if c.stat().st_size <= 16 * 1024 and "runtimes" not in c.parts][:6]:
        put("crd", c.name, b"\x01" + without_descriptions(c.read_text()).encode())
    for name in ["queues", "memberclusters", "placements"]:
        text = read(ROOT / f"manifests/crds/{name}.stowage.dev.yaml")
        put("crd", f"{name}.yaml", b"\x01" + without_descriptions(text.decode()).encode())


def pb_field(num, payload):
    """A length-delimited protobuf field."""
    key = (num << 3) | 2
    return varint(key) + varint(len(payload)) + payload


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_body(api_version, kind, message):
    """k8s\\0 + runtime.Unknown{typeMeta{apiVersion, kind}, raw}."""
    type_meta = pb_field(1, api_version.encode()) + pb_field(2, kind.encode())
    return b"k8s\0" + pb_field(1, type_meta) + pb_field(2, message)


def hub():
    def put_hub(name, op, pick, body):
        if isinstance(body, str):
            body = body.encode()
        put("hub", name, bytes([op, pick]) + body)

    # ObjectMeta: name = 1, namespace = 3, labels = 11 (map<string,string>).
    meta = pb_field(1, b"cm") + pb_field(3, b"default") + pb_field(11, pb_field(1, b"app") + pb_field(2, b"x"))
    put_hub("pb-configmap", CREATE_PB, 0x00, pb_body("v1", "ConfigMap", pb_field(1, meta) + pb_field(2, pb_field(1, b"k") + pb_field(2, b"v"))))
    put_hub("pb-namespace", CREATE_PB, 0x00, pb_body("v1", "Namespace", pb_field(1, pb_field(1, b"team-b"))))
    put_hub("pb-secret", CREATE_PB, 0x00, pb_body("v1", "Secret", pb_field(1, meta) + pb_field(2, pb_field(1, b"k") + pb_field(2, b"\x00\x01"))))
    pod = pb_field(1, meta) + pb_field(2, pb_field(2, pb_field(1, b"c") + pb_field(2, b"busybox")))
    put_hub("pb-pod", CREATE_PB, 0x00, pb_body("v1", "Pod", pod))
    for ex in ["single-node", "torch-rack", "mpi", "too-big", "queue"]:
        text = (ROOT / f"examples/{ex}.yaml").read_text()
        put_hub(f"create-{ex}.yaml", CREATE_YAML, 0x00, text)
        put_hub(f"create-{ex}-as-agent.yaml", CREATE_YAML, 0x20, text)
    put_hub("create-default-queue.yaml", CREATE_YAML, 0x00, read(ROOT / "manifests/hub/default-queue.yaml"))
    put_hub("create-membercluster.yaml", CREATE_YAML, 0x00, read(ROOT / "manifests/hub-member-access/membercluster.yaml"))
    put_hub("create-namespace.yaml", CREATE_YAML, 0x00, read(ROOT / "manifests/hub/namespace.yaml"))
    put_hub("create-serviceaccount.yaml", CREATE_YAML, 0x00, read(ROOT / "manifests/hub/dispatcher-serviceaccount.yaml"))
    for rt in ["torch_distributed", "mpi_distributed"]:
        put_hub(f"create-{rt}.yaml", CREATE_YAML, 0x00, read(ROOT / f"upstream/trainer/runtimes/{rt}.yaml"))
    policy = (ROOT / "manifests/hub/status-writers-policy.yaml").read_text().split("\n---\n")
    put_hub("create-policy.yaml", CREATE_YAML, 0x00, policy[0])
    placement = {
        "apiVersion": "stowage.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "fuzz", "namespace": "default", "labels": {"stowage.dev/cluster": "m1"}},
        "spec": {"trainJobUid": "0b6f9a3e-0000-4000-8000-000000000001", "cluster": "m1", "epoch": 2, "podSets": []},
        "status": {"phase": "Succeeded"},
    }
    # Placement status written by its own agent (0x28: user 2, status), another member's
    # (0x38) and the dispatcher (0x18).
    for name, pick in [("own-agent", 0x28), ("other-agent", 0x38), ("dispatcher", 0x18)]:
        put_hub(f"update-placement-status-{name}.json", UPDATE_JSON, pick, json.dumps(placement))
    put_hub("update-trainjob.json", UPDATE_JSON, 0x00, json.dumps({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "fuzz", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 4}}}))
    put_hub("merge-trainjob.json", MERGE, 0x00, '{"spec":{"trainer":{"numNodes":3,"image":"x"}}}')
    put_hub("merge-placement-status.json", MERGE, 0x29, '{"status":{"phase":"Lost","message":"gone"}}')
    put_hub("jsonpatch-trainjob.json", JSONPATCH, 0x00,
            '[{"op":"replace","path":"/spec/trainer/numNodes","value":5},{"op":"add","path":"/metadata/labels/a","value":"b"},'
            '{"op":"remove","path":"/metadata/labels/app"},{"op":"test","path":"/kind","value":"TrainJob"}]')
    put_hub("strategic-pod.json", STRATEGIC, 0x07, '{"spec":{"containers":[{"name":"c","image":"alpine","$patch":"replace"}]}}')
    put_hub("apply-memberclusters.yaml", APPLY, 0x02, "apiVersion: stowage.dev/v1alpha1\nkind: MemberCluster\nmetadata: {name: fuzz}\nspec: {cordoned: true}\n")
    put_hub("list-selectors", LIST, 0x00, "app in (fuzz,x),!gone,env!=prod\0metadata.name=fuzz,metadata.namespace!=a\030\0Object")
    put_hub("list-timeout-huge", LIST, 0x07, "\0\018446744073709551615")
    put_hub("alias.yaml", CREATE_YAML, 0x08, "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nmetadata: {name: n}\n")


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    trace()
    fleet()
    render()
    hub()
    crd()
    for d in sorted(CORPUS.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
