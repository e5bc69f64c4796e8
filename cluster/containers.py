"""A multi-node Ray cluster of containers on one machine: the head and every worker node of a topology, each a
container of the project image (cluster/image/build.sh) running `ray start --block`.

    python -m cluster.containers TOPOLOGY [--image genselect-rl:0.1.0-cpu] [--dashboard-port 8265]
                                          [--token-file FILE] [--shared DIR] [--state FILE]

The containers use the host's network (no bridge: the nodes talk over 127.0.0.1) with ports of their own, and
each has its own file system, /tmp/ray and /dev/shm, as machines of their own would. What a job's nodes must
share (the model and data folders, the run folder) goes under `--shared DIR`, mounted at the same path in every
container. Each node offers its type's resources plus one unit of a resource named after its container, so a
node id can be told apart from the state API (`ray list nodes`). With `--token-file FILE` every node runs with
`RAY_AUTH_MODE=token` and the token of FILE (written if missing), as `cluster.local` does. Blocks until
SIGTERM or SIGINT, then removes the containers; `docker kill <container>` kills a node as a machine's death
would. With `--state FILE`: the dashboard address and the containers, as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cluster import topology
from cluster.local import FAST_HEALTH_CHECKS, auth_env
from core.net import rendezvous_port

OBJECT_STORE_BYTES = 150 * 1024 * 1024  # what ray.cluster_utils gives each node of cluster.local
SHM = "1g"


def container_name(prefix: str, node_type: str, index: int) -> str:
    return f"{prefix}-{node_type}-{index}"


def ray_start(node: topology.NodeType, name: str, head_address: str | None, ports: dict) -> list[str]:
    """The `ray start --block` command of one node (the head when `head_address` is None)."""
    resources = {**node.custom_resources(), name: 1}
    cmd = ["ray", "start", "--block", "--node-ip-address=127.0.0.1", f"--num-cpus={int(node.resources['CPU'])}",
           f"--num-gpus={int(node.resources.get('GPU', 0))}", f"--resources={json.dumps(resources)}",
           f"--object-store-memory={OBJECT_STORE_BYTES}", "--min-worker-port=0", "--max-worker-port=0",
           f"--dashboard-agent-listen-port={ports['agent']}", "--disable-usage-stats"]
    if head_address is None:
        return cmd + ["--head", f"--port={ports['gcs']}", "--dashboard-host=127.0.0.1",
                      f"--dashboard-port={ports['dashboard']}", f"--ray-client-server-port={ports['client']}",
                      f"--system-config={json.dumps(FAST_HEALTH_CHECKS)}"]
    return cmd + [f"--address={head_address}"]


def docker_run(image: str, name: str, command: list[str], env: dict, shared: str | None) -> None:
    """Start one node's container (host network, an init process, its own /dev/shm)."""
    args = ["docker", "run", "-d", "--name", name, "--network", "host", "--init", f"--shm-size={SHM}",
            "--label", "genselect.cluster=containers"]
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    if shared:
        args += ["-v", f"{shared}:{shared}"]
    done = subprocess.run([*args, image, *command], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"docker run {name}: {done.stderr.strip()}")


def node_env(token_file: str | None) -> dict:
    """The token, passed by value: the node's user cannot read a root-only token file of the host."""
    env = auth_env(token_file)
    if env.get("RAY_AUTH_TOKEN_PATH"):
        env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": Path(env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()}
    return env


def start(topo: topology.Topology, image: str, dashboard_port: int, token_file: str | None = None,
          shared: str | None = None, prefix: str = "genselect") -> dict:
    """Start the head and `replicas` nodes of every worker type; the cluster's description."""
    env = node_env(token_file)
    gcs = rendezvous_port()
    head = container_name(prefix, "head", 0)
    ports = {"gcs": gcs, "dashboard": dashboard_port, "client": rendezvous_port(), "agent": rendezvous_port()}
    nodes = [{"type": "head", "container": head}]
    docker_run(image, head, ray_start(topo.head, head, None, ports), env, shared)
    for node_type in topo.workers:
        for i in range(node_type.replicas):
            name = container_name(prefix, node_type.name, i)
            command = ray_start(node_type, name, f"127.0.0.1:{gcs}", {"agent": rendezvous_port()})
            docker_run(image, name, command, env, shared)
            nodes.append({"type": node_type.name, "container": name})
    return {"dashboard": f"http://127.0.0.1:{dashboard_port}", "gcs_address": f"127.0.0.1:{gcs}", "nodes": nodes,
            "image": image, "time": time.time()}


def remove(cluster: dict) -> None:
    """Remove every container of the cluster (running or not)."""
    names = [n["container"] for n in cluster["nodes"]]
    subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.containers", description=__doc__.split("\n\n")[0])
    parser.add_argument("topology")
    parser.add_argument("--image", default=None, help="default: genselect-rl:<version>-cpu (make image)")
    parser.add_argument("--dashboard-port", type=int, default=8265)
    parser.add_argument("--token-file", default=None)
    parser.add_argument("--shared", default=None, help="a folder every node mounts at the same path")
    parser.add_argument("--state", default=None, help="write the cluster's JSON description here")
    args = parser.parse_args(argv)
    from cluster.kuberay.generate import default_image

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    cluster = start(topology.load(args.topology), args.image or default_image("cpu"), args.dashboard_port,
                    args.token_file, args.shared and os.path.abspath(args.shared))
    try:
        if args.state:
            Path(args.state).write_text(json.dumps(cluster, indent=1))
        print(json.dumps(cluster), flush=True)
        while not stop:
            time.sleep(0.5)
    finally:
        remove(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
