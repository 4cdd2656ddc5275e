#!/usr/bin/env python3
"""Drive a Stowage hub with the real Kubeflow Python SDK (kubeflow==0.5.0, tests/sdk/requirements.txt).

    python sdk_flow.py --kubeconfig /tmp/sdkdev/hub.kubeconfig --namespace default

Uses only the SDK's public API (kubeflow.trainer, kubeflow.trainer.options):
  list_runtimes -> get_runtime -> train (CustomTrainer, 2 nodes x 8 nvidia.com/gpu, with the
  stowage.dev/simulated-duration-seconds annotation) -> wait_for_job_status(Running), with a step
  per node -> get_job_logs(follow=True) -> wait_for_job_status(Complete) -> get_job_logs (node 0
  and the last node) -> get_job -> get_job_events -> list_jobs -> delete_job, then checks with
  list_jobs that the TrainJob is gone.

Progress goes to stderr. On success stdout holds exactly one line, a JSON object
{"log", "running_steps", "name", "status", "runtime", "num_nodes", "events"}, and the exit code is 0. On any failure stderr ends
with "sdk_flow: FAILED at <step>: <reason>" and the exit code is 1 (2 for bad arguments).
"""

import argparse
import json
import sys
import time

from kubeflow.trainer import CustomTrainer, KubernetesBackendConfig, TrainerClient
from kubeflow.trainer.options import Annotations

DURATION_ANNOTATION = "stowage.dev/simulated-duration-seconds"


def train_fn():
    # The SDK embeds this function's source in the TrainJob's command (torchrun on
    # torch-distributed); the simulated members never run it.
    print("hello from the Stowage SDK flow")


class Failure(Exception):
    pass


def log(msg):
    print(f"sdk_flow: {msg}", file=sys.stderr, flush=True)


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def describe(job):
    steps = [
        {
            "name": s.name,
            "status": s.status,
            "pod": s.pod_name,
            "device": s.device,
            "device_count": s.device_count,
        }
        for s in job.steps
    ]
    return (
        f"name={job.name} status={job.status} runtime={job.runtime.name} "
        f"num_nodes={job.num_nodes} created={job.creation_timestamp} steps={json.dumps(steps)}"
    )


def run(args, state):
    state["step"] = "connect"
    client = TrainerClient(
        backend_config=KubernetesBackendConfig(
            namespace=args.namespace, config_file=args.kubeconfig
        )
    )

    state["step"] = "list_runtimes"
    runtimes = client.list_runtimes()
    names = sorted(r.name for r in runtimes)
    log(f"list_runtimes: {names}")
    check(args.runtime in names, f"runtime {args.runtime!r} not among {names}")

    state["step"] = "get_runtime"
    runtime = client.get_runtime(args.runtime)
    log(
        f"get_runtime: name={runtime.name} kind={runtime.kind.value} "
        f"framework={runtime.trainer.framework} image={runtime.trainer.image} "
        f"num_nodes={runtime.trainer.num_nodes} device={runtime.trainer.device} "
        f"device_count={runtime.trainer.device_count}"
    )
    check(runtime.name == args.runtime, f"get_runtime returned {runtime.name!r}")

    state["step"] = "train"
    name = client.train(
        runtime=runtime,
        trainer=CustomTrainer(
            func=train_fn,
            num_nodes=args.num_nodes,
            resources_per_node={"gpu": args.gpus},
        ),
        options=[Annotations({DURATION_ANNOTATION: str(args.duration)})],
    )
    state["name"] = name
    log(f"train: created TrainJob {args.namespace}/{name}")

    state["step"] = "wait_for_job_status"
    seen = []

    def on_poll(job):
        if not seen or seen[-1] != job.status:
            seen.append(job.status)
            log(f"  {job.name}: {job.status}")

    started = time.monotonic()
    # Running while its pods run: the SDK counts the TrainJob's pods (their copies on the hub,
    # bound to the member's virtual Node) when the TrainJob has no conditions.
    job = client.wait_for_job_status(
        name,
        status={"Running"},
        timeout=args.timeout,
        polling_interval=1,
        callbacks=[on_poll],
    )
    log(f"wait_for_job_status(Running): {describe(job)}")
    check(job.status == "Running", f"status {job.status!r}, want 'Running'")
    running_steps = [s.name for s in job.steps]
    check(
        len([s for s in running_steps if s.startswith("node")]) == args.num_nodes,
        f"steps {running_steps}, want {args.num_nodes} node steps",
    )
    # Followed from the hub while it runs (the hub's API server, the log relay, the member's
    # agent, the member's pod), to the container's end.
    state["step"] = "get_job_logs(follow=True)"
    followed = list(client.get_job_logs(name, follow=True))
    log(f"get_job_logs(follow=True): {followed}")
    check(len(followed) >= 3 and followed[0].startswith("+ "), f"no command line first: {followed}")
    check(followed[-1] == "stowage-sim: exited with code 0", f"the follow did not end with the exit: {followed}")
    job = client.wait_for_job_status(
        name,
        status={"Complete"},
        timeout=args.timeout,
        polling_interval=1,
        callbacks=[on_poll],
    )
    log(f"wait_for_job_status: {job.status} after {time.monotonic() - started:.1f}s ({' -> '.join(seen)})")

    state["step"] = "get_job"
    job = client.get_job(name)
    log(f"get_job: {describe(job)}")
    check(job.name == name, f"get_job returned {job.name!r}")
    check(job.status == "Complete", f"status {job.status!r}, want 'Complete'")
    check(job.runtime.name == args.runtime, f"runtime {job.runtime.name!r}, want {args.runtime!r}")
    check(job.num_nodes == args.num_nodes, f"num_nodes {job.num_nodes}, want {args.num_nodes}")
    state["step"] = "get_job_logs"
    logs = list(client.get_job_logs(name))
    check(logs == followed, f"get_job_logs {logs} differs from what was followed {followed}")
    last_node = f"node-{args.num_nodes - 1}"
    other = list(client.get_job_logs(name, step=last_node))
    log(f"get_job_logs(step={last_node!r}): {other}")
    check(
        any(line.startswith(f"stowage-sim: node rank {args.num_nodes - 1} ") for line in other),
        f"{last_node}'s log is not its own: {other}",
    )
    result = {
        "log": logs,
        "running_steps": running_steps,
        "name": job.name,
        "status": job.status,
        "runtime": job.runtime.name,
        "num_nodes": job.num_nodes,
    }

    state["step"] = "get_job_events"
    events = client.get_job_events(name)
    reasons = [e.reason for e in events]
    log(f"get_job_events: {[(e.reason, e.message) for e in events]}")
    for want in ("Placed", "Started", "Completed"):
        check(want in reasons, f"no {want} Event among {reasons}")
    check(
        all(e.involved_object_kind == "TrainJob" and e.involved_object_name == name for e in events),
        "an Event about something else",
    )
    result["events"] = reasons

    state["step"] = "list_jobs"
    listed = [j.name for j in client.list_jobs()]
    log(f"list_jobs: {listed}")
    check(name in listed, f"{name} not in list_jobs() {listed}")

    state["step"] = "delete_job"
    client.delete_job(name)
    state["name"] = None  # nothing left to clean up on a later failure
    log(f"delete_job: {name}")

    state["step"] = "list_jobs after delete"
    deadline = time.monotonic() + args.delete_timeout
    while True:
        listed = [j.name for j in client.list_jobs()]
        if name not in listed:
            break
        check(
            time.monotonic() < deadline,
            f"{name} still listed {args.delete_timeout}s after delete_job: {listed}",
        )
        time.sleep(0.5)
    log(f"list_jobs: {name} is gone")

    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", required=True, help="the hub's kubeconfig")
    p.add_argument("--namespace", default="default")
    p.add_argument("--runtime", default="torch-distributed")
    p.add_argument("--num-nodes", type=int, default=2)
    p.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node")
    p.add_argument("--duration", type=int, default=6, help=f"{DURATION_ANNOTATION} for the simulated run")
    p.add_argument("--timeout", type=int, default=120, help="seconds to wait for Complete")
    p.add_argument("--delete-timeout", type=int, default=30, help="seconds for the deleted TrainJob to vanish")
    args = p.parse_args()

    state = {"step": "start", "name": None}
    try:
        result = run(args, state)
    except BaseException as e:  # noqa: BLE001 - report every failure, incl. KeyboardInterrupt
        reason = f"{type(e).__name__}: {e}"
        cause = e.__cause__ or e.__context__
        while cause is not None:
            reason += f" <- {type(cause).__name__}: {str(cause).strip()}"
            cause = cause.__cause__ or cause.__context__
        if state["name"]:
            try:
                client = TrainerClient(
                    backend_config=KubernetesBackendConfig(
                        namespace=args.namespace, config_file=args.kubeconfig
                    )
                )
                client.delete_job(state["name"])
                log(f"cleanup: deleted {state['name']}")
            except Exception as ce:  # noqa: BLE001
                log(f"cleanup: could not delete {state['name']}: {ce}")
        log(f"FAILED at {state['step']}: {reason}")
        sys.exit(1)

    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
