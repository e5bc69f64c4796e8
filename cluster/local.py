"""A multi-node Ray cluster on one machine, from a topology, with Ray's own multi-node test harness.

    python -m cluster.local TOPOLOGY [--dashboard-port 8265] [--token-file FILE] [--state FILE] [--control DIR]

Starts a head node and `replicas` worker nodes of every worker type of `cluster/topologies/TOPOLOGY.yaml`
(`ray.cluster_utils.Cluster`: each node is its own raylet, object store and worker processes, with the
type's CPUs, GPUs and custom resources), prints and writes (`--state`) a JSON description (GCS address,
dashboard URL, nodes with their type and id), and blocks until SIGTERM or SIGINT.

Token authentication (what a Ray 2.60 `ray start --head` turns on when it finds a token): with
`--token-file FILE`, every process of the cluster runs with `RAY_AUTH_MODE=token` and
`RAY_AUTH_TOKEN_PATH=FILE` (a new random token is written there if the file does not exist). Clients pass
the same two variables (or `RAY_AUTH_TOKEN=<token>`), e.g.
`RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=FILE ray job submit --address http://127.0.0.1:8265 -- ...`.
Without `--token-file` the cluster runs with `RAY_AUTH_MODE=disabled` (a throwaway local cluster).

Faults on demand: a file `kill-<node id>` in `--control DIR` removes that node at once (its raylet and
workers are SIGKILLed, as when a machine dies); `kill-actor-<class name>` removes the node where the alive
actor of that class runs; `add-<worker type>` adds a node of that type. With `--state FILE`, FILE.actors.json
is rewritten every second: the node id of each alive actor, by class name (read from the GCS directly, which
is far quicker than the state API on a loaded machine).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

from cluster import topology
from core.net import free_port

# node death is noticed within ~6-10 s instead of Ray's default ~30 s (lenient enough for a loaded machine)
FAST_HEALTH_CHECKS = {"health_check_initial_delay_ms": 2000, "health_check_period_ms": 2000,
                      "health_check_timeout_ms": 5000, "health_check_failure_threshold": 3}


def auth_env(token_file: str | None) -> dict:
    """The environment variables that make a Ray process (server or client) use the cluster's token."""
    if not token_file:
        return {"RAY_AUTH_MODE": "disabled"}
    path = Path(token_file)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path.resolve())}


def _node_args(node_type: topology.NodeType) -> dict:
    args = {"num_cpus": node_type.resources["CPU"], "num_gpus": node_type.resources.get("GPU", 0)}
    if node_type.custom_resources():
        args["resources"] = node_type.custom_resources()
    if node_type.labels:
        args["labels"] = dict(node_type.labels)
    return args


def _own_dir(temp_dir: str) -> str:
    """A temp dir of a worker node's own, as on a machine of its own: nodes sharing one would share the
    runtime-env agent's unpacked working_dir, and one agent re-unpacking it under another's job breaks
    imports (seen here: ModuleNotFoundError in the job's driver)."""
    return tempfile.mkdtemp(prefix="n", dir=temp_dir)


def start(topo: topology.Topology, dashboard_port: int, temp_dir: str):
    """(cluster, [(type name, node)]) with every worker type at `replicas`."""
    from ray.cluster_utils import Cluster

    head_args = {**_node_args(topo.head), "include_dashboard": True, "dashboard_host": "127.0.0.1",
                 "dashboard_port": dashboard_port, "temp_dir": temp_dir, "_system_config": FAST_HEALTH_CHECKS,
                 # not Ray's fixed 52365: another Ray instance on the machine may hold it, and a head whose
                 # agent cannot bind answers every job submission with "No available agent"
                 "dashboard_agent_listen_port": free_port()}
    cluster = Cluster(initialize_head=True, connect=False, head_node_args=head_args)
    nodes = [(topo.head.name, cluster.head_node)]
    for node_type in topo.workers:
        for _ in range(node_type.replicas):
            nodes.append((node_type.name, cluster.add_node(**_node_args(node_type), temp_dir=_own_dir(temp_dir))))
    cluster.wait_for_nodes(timeout=120)
    return cluster, nodes


def describe(cluster, nodes: list, dashboard_port: int) -> dict:
    return {"gcs_address": cluster.gcs_address, "dashboard": f"http://127.0.0.1:{dashboard_port}",
            "nodes": [{"type": name, "node_id": node.node_id} for name, node in nodes], "time": time.time()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.local", description=__doc__.split("\n\n")[0])
    parser.add_argument("topology")
    parser.add_argument("--dashboard-port", type=int, default=8265)
    parser.add_argument("--token-file", default=None)
    parser.add_argument("--state", default=None, help="write the cluster's JSON description here")
    parser.add_argument("--control", default=None, help="folder watched for kill-<node id> / add-<type> files")
    args = parser.parse_args(argv)
    os.environ.update(auth_env(args.token_file))  # before Ray reads its config: every node inherits it
    topo = topology.load(args.topology)
    temp_dir = tempfile.mkdtemp(prefix="rl", dir="/tmp")  # short: Ray's socket paths live under it
    os.environ["RAY_TMPDIR"] = temp_dir  # the harness's address file goes here, not into /tmp/ray
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    cluster, nodes = start(topo, args.dashboard_port, temp_dir)

    killed = []

    def actors() -> dict:
        table = cluster.global_state.actor_table(None)
        return {a["ActorClassName"]: a["Address"]["NodeID"] for a in table.values() if a["State"] == "ALIVE"}

    def kill(node_id: str) -> None:
        for entry in [e for e in nodes if e[1].node_id == node_id and e[1] is not cluster.head_node]:
            cluster.remove_node(entry[1], allow_graceful=False)
            nodes.remove(entry)
            killed.append({"type": entry[0], "node_id": node_id, "time": time.time()})

    def publish() -> None:
        state = {**describe(cluster, nodes, args.dashboard_port), "killed": killed}
        if args.state:
            tmp = Path(args.state + ".tmp")
            tmp.write_text(json.dumps(state, indent=1))
            os.replace(tmp, args.state)
        print(json.dumps(state), flush=True)

    publish()
    control = Path(args.control) if args.control else None
    last_actors = 0.0
    try:
        while not stop:
            time.sleep(0.2)
            if args.state and time.time() - last_actors > 1.0:
                tmp = Path(args.state + ".actors.tmp")
                tmp.write_text(json.dumps(actors()))
                os.replace(tmp, args.state + ".actors.json")
                last_actors = time.time()
            for request in sorted(control.iterdir()) if control and control.exists() else []:
                kind, _, target = request.name.partition("-")
                request.unlink()
                if kind == "kill" and target.startswith("actor-"):
                    node_id = actors().get(target[len("actor-"):])
                    if node_id:
                        kill(node_id)
                elif kind == "kill":
                    kill(target)
                elif kind == "add":
                    nodes.append((target, cluster.add_node(**_node_args(topo.worker(target)),
                                                           temp_dir=_own_dir(cluster.head_node.get_temp_dir_path()))))
                publish()
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
