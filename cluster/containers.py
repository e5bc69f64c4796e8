"""A multi-node Ray cluster of containers on one machine: the head and every worker node of a topology, each a
container of the project image (cluster/image/build.sh) running `ray start --block`.

    python -m cluster.containers TOPOLOGY [--image genselect-rl:0.1.0-cpu] [--dashboard-port 8265]
                                          [--token-file FILE] [--shared DIR] [--state FILE]

The containers use the host's network (no bridge) with ports of their own; each node has a loopback address of
its own (127.0.0.10, .11, ...: all traffic stays on loopback, and `ray list nodes` tells the nodes apart by
`node_ip`) and its own file system, /tmp/ray and /dev/shm, as machines of their own would. What a job's nodes
must share (the model and data folders, the run folder) goes under `--shared DIR`, mounted at the same path in
every container. With `--token-file FILE` every node runs with `RAY_AUTH_MODE=token` and the token of FILE
(written if missing), as `cluster.local` does. Blocks until SIGTERM or SIGINT, then removes the containers;
`docker kill <container>` kills a node as a machine's death would. With `--state FILE`: the cluster's
description (dashboard address, containers and their addresses) as JSON.
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


def ray_start(node: topology.NodeType, ip: str, head_address: str | None, ports: dict) -> list[str]:
    """The `ray start --block` command of one node at `ip` (the head when `head_address` is None)."""
    cmd = ["ray", "start", "--block", f"--node-ip-address={ip}", f"--num-cpus={int(node.resources['CPU'])}",
           f"--num-gpus={int(node.resources.get('GPU', 0))}", f"--resources={json.dumps(node.custom_resources())}",
           f"--object-store-memory={OBJECT_STORE_BYTES}", "--min-worker-port=0", "--max-worker-port=0",
           f"--dashboard-agent-listen-port={ports['agent']}", "--disable-usage-stats"]
    if head_address is None:
        return cmd + ["--head", f"--port={ports['gcs']}", "--dashboard-host=127.0.0.1",
                      f"--dashboard-port={ports['dashboard']}", f"--ray-client-server-port={ports['client']}",
                      f"--system-config={json.dumps(FAST_HEALTH_CHECKS)}"]
    return cmd + [f"--address={head_address}"]


def node_ip(index: int) -> str:
    """The loopback address of the `index`-th node (127.0.0.1 itself would not do: `ray start` replaces it, as an
    address other machines cannot reach, with the host's first interface address)."""
    return f"127.0.0.{10 + index}"


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
    """Start the head and `replicas` nodes of every worker type; the cluster's description. If a container cannot
    be started, those already started are removed and the error is raised."""
    env = node_env(token_file)
    kinds = [("head", topo.head, 0)] + [(w.name, w, i) for w in topo.workers for i in range(w.replicas)]
    gcs = f"{node_ip(0)}:{rendezvous_port()}"
    cluster = {"dashboard": f"http://127.0.0.1:{dashboard_port}", "gcs_address": gcs, "nodes": [], "image": image,
               "time": time.time()}
    try:
        for index, (kind, node_type, replica) in enumerate(kinds):
            name, ip = container_name(prefix, kind, replica), node_ip(index)
            ports = {"agent": rendezvous_port()}
            if kind == "head":
                ports.update(gcs=gcs.split(":")[1], dashboard=dashboard_port, client=rendezvous_port())
            command = ray_start(node_type, ip, None if kind == "head" else gcs, ports)
            cluster["nodes"].append({"type": kind, "container": name, "ip": ip})
            docker_run(image, name, command, {**env, "VLLM_HOST_IP": ip}, shared)  # vLLM would guess the interface
    except BaseException:
        remove(cluster)
        raise
    return cluster


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
