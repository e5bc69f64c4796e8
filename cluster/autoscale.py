"""An autoscaling Ray cluster on one machine: a head node alone, and Ray's fake multi-node autoscaler
(the `fake_multinode` node provider that Ray's own autoscaler tests use) adding and removing worker nodes
of the topology's worker types, as KubeRay's autoscaler adds and removes worker pods.

    python -m cluster.autoscale TOPOLOGY [--port 6379] [--dashboard-port 8265] [--token-file FILE]
                                         [--idle-timeout-s 15] [--temp-dir DIR]

Each worker type of `cluster/topologies/TOPOLOGY.yaml` becomes an autoscaler node type with the type's
resources and `min_replicas`/`max_replicas` as `min_workers`/`max_workers`; a worker node idle for
`--idle-timeout-s` is removed. The process becomes `ray start --head --block` (stop it with SIGTERM, or
kill its process group). `ray.cluster_utils.AutoscalingCluster` is not used: its `start()` runs
`ray stop --force`, which kills every Ray process of the user on the machine, and the Ray 2.60 wheel lacks
the `example.yaml` it builds its config from; this writes the same kind of config and starts the same
provider. Token authentication as in `cluster.local` (`--token-file`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from cluster import topology
from cluster.local import auth_env
from core.net import free_port

HEAD_TYPE = "ray.head.default"  # the fake provider's fixed name for the head's node type


def autoscaling_config(topo: topology.Topology, gcs_address: str, idle_timeout_s: float) -> dict:
    """The cluster config the fake multi-node provider reads (the schema of Ray's cluster YAML)."""
    types = {HEAD_TYPE: {"resources": dict(topo.head.resources), "node_config": {}, "max_workers": 0}}
    for w in topo.workers:
        types[w.name] = {"resources": {k: (int(v) if float(v).is_integer() else v) for k, v in w.resources.items()},
                         "node_config": {}, "min_workers": w.min_replicas, "max_workers": w.max_replicas}
    return {
        "cluster_name": f"genselect-{topo.name}",
        "max_workers": sum(w.max_replicas for w in topo.workers),
        "provider": {"type": "fake_multinode", "gcs_address": gcs_address, "use_node_id_as_ip": True,
                     "disable_node_updaters": True, "disable_launch_config_check": True},
        "available_node_types": types,
        "head_node_type": HEAD_TYPE,
        "auth": {},
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_s / 60.0,
        "docker": {}, "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [],
    }


def command(topo: topology.Topology, config_path: str, port: int, dashboard_port: int, temp_dir: str) -> list:
    ray = str(Path(sys.executable).with_name("ray"))
    head = topo.head.resources
    cmd = [ray, "start", "--head", "--block", f"--port={port}", f"--autoscaling-config={config_path}",
           f"--num-cpus={int(head['CPU'])}", f"--num-gpus={int(head.get('GPU', 0))}", f"--temp-dir={temp_dir}",
           "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
           f"--dashboard-agent-listen-port={free_port()}"]  # not the fixed 52365 another Ray may hold
    if topo.head.custom_resources():
        cmd.append(f"--resources={json.dumps(topo.head.custom_resources())}")
    return cmd


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.autoscale", description=__doc__.split("\n\n")[0])
    parser.add_argument("topology")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--dashboard-port", type=int, default=8265)
    parser.add_argument("--token-file", default=None)
    parser.add_argument("--idle-timeout-s", type=float, default=15.0)
    parser.add_argument("--temp-dir", default=None)
    args = parser.parse_args(argv)
    topo = topology.load(args.topology)
    temp_dir = args.temp_dir or tempfile.mkdtemp(prefix="ra", dir="/tmp")  # short: socket paths live under it
    import ray._private.services as services

    gcs = f"{services.get_node_ip_address()}:{args.port}"
    config_path = Path(temp_dir) / "autoscaling.json"
    config_path.write_text(json.dumps(autoscaling_config(topo, gcs, args.idle_timeout_s), indent=1))
    env = {**os.environ, **auth_env(args.token_file), "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
           "RAY_TMPDIR": temp_dir}
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    cmd = command(topo, str(config_path), args.port, args.dashboard_port, temp_dir)
    print(json.dumps({"gcs_address": gcs, "dashboard": f"http://127.0.0.1:{args.dashboard_port}",
                      "config": str(config_path), "command": cmd}), flush=True)
    os.execve(cmd[0], cmd, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
