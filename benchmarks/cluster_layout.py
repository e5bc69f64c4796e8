"""On paper: how configs/paper_math.yaml is laid out on 1, 2 and 8 nodes of 8 GPUs (cluster.layout, the
placement code the driver runs before it starts any actor), and what one weight broadcast costs there.

    python benchmarks/cluster_layout.py        # prints a markdown table (BENCHMARKS.md, "Clusters")

Broadcast model (stated, not measured on GPUs: none here): 1.7B parameters in bf16 = 3.4 GB; NCCL inside a
node ~150 GB/s, across nodes ~40 GB/s (one 400 Gb/s NIC); NCCL's pipelined broadcast costs about
size/bandwidth of the slowest link whatever the number of receivers; the Ray object-store path (one put,
every receiving node pulls from the learner's node) costs size/bandwidth per receiving node, since they all
pull through the learner node's one NIC.
"""
from cluster.layout import fit_nodes
from cluster.placement import PlacementError, plan
from core.config import load_config

GB = 3.4
NVLINK, NIC = 150.0, 40.0
NODE = {"CPU": 96.0, "GPU": 8.0}
UNPINNED = ["cluster.topology=''", "cluster.learner_node_resource=''", "cluster.rollout_node_resource=''",
            "cluster.verifier_node_resource=''"]


def layout(nodes: int, *overrides) -> str:
    cfg = load_config("paper_math", UNPINNED + list(overrides))
    placement = plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster)
    try:
        chosen = fit_nodes(placement, [(f"n{i}", dict(NODE)) for i in range(nodes)])
    except PlacementError as err:
        return f"| {nodes} | {' '.join(overrides) or 'as is'} | refused: {str(err)[:90]}... | | |"
    where = {}
    for slot, n in zip(placement.grouped, chosen):
        where.setdefault(slot.role, set()).add(n)
    learner_node = min(where["learner"])
    remote = len(where["rollout"] - {learner_node})
    local = len(where["rollout"] & {learner_node})
    nccl = GB / (NIC if remote else NVLINK)
    store = remote * GB / NIC + (GB / NVLINK if local else 0)
    used = len(set(chosen))
    return (f"| {nodes} | {' '.join(overrides) or 'as is'} | {used} nodes: learner on {len(where['learner'])}, "
            f"rollout on {len(where['rollout'])} ({remote} away from the learner) | {nccl:.2f} s | {store:.2f} s |")


def main() -> None:
    print("| nodes of 8 GPUs | paper_math | layout (cluster.layout.fit_nodes) | NCCL broadcast | object-store broadcast |")
    print("|---|---|---|---|---|")
    print(layout(1))
    print(layout(1, "learner.num_ranks=4", "rollout.num_workers=4"))
    print(layout(2))
    print(layout(8))
    print(layout(8, "rollout.num_workers=56"))


if __name__ == "__main__":
    main()
