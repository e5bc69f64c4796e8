"""The KubeRay manifests are generated from the topology (never hand-edited), validate against the
KubeRay v1.7.0 CRD schemas (openAPIV3Schema, with unknown fields refused as `kubectl apply
--validate=strict` refuses them), and their entrypoints name a config and a module that exist."""
import copy
import functools
import importlib.util
import json
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from cluster import topology
from cluster.kuberay import generate
from cluster.layout import fit_nodes
from cluster.placement import plan
from core.config import load_config, resolve_config_path

ROOT = Path(__file__).resolve().parent.parent.parent
CRDS = ROOT.parent / "shared" / "kuberay-crds"
if not CRDS.exists():  # a git worktree beside the main checkout
    CRDS = Path("/work/shared/kuberay-crds")
MANIFESTS = sorted((ROOT / "cluster" / "kuberay").glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def _schema(kind: str) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRDS / f"ray.io_{kind.lower()}s.yaml").read_text(), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


def _unknown_fields(doc, schema, path="") -> list:
    """Keys that the structural schema does not declare (the API server prunes or, strict, refuses them)."""
    out = []
    if isinstance(doc, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in doc.items():
            if props is not None and key in props:
                out += _unknown_fields(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += _unknown_fields(value, extra, f"{path}.{key}")
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                out.append(f"{path}.{key}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(doc):
            out += _unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out


def validate(manifest: dict) -> None:
    schema = _schema(manifest["kind"])
    body = {k: v for k, v in manifest.items() if k != "metadata"}  # metadata: ObjectMeta, not in the CRD
    jsonschema.Draft7Validator(schema).validate(body)
    unknown = _unknown_fields(body, schema)
    if unknown:
        raise jsonschema.ValidationError(f"unknown fields: {unknown}")


def test_manifests_are_what_the_generator_writes():
    assert generate.main(["--check"]) == 0
    assert {p.name for p in MANIFESTS} == set(generate.manifests())


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_against_the_kuberay_crd(path):
    manifest = yaml.safe_load(path.read_text())
    assert manifest["apiVersion"] == "ray.io/v1"
    validate(manifest)
    spec = manifest["spec"] if manifest["kind"] == "RayCluster" else manifest["spec"]["rayClusterSpec"]
    assert spec["enableInTreeAutoscaling"] is True and spec["authOptions"]["mode"] == "token"
    assert {g["groupName"] for g in spec["workerGroupSpecs"]} == {"rollout", "learner", "verifier"}


@pytest.mark.parametrize("broken, message", [
    (lambda m: m["spec"].update(workerGroupSpec=m["spec"].pop("workerGroupSpecs")), "unknown fields"),
    (lambda m: m["spec"]["workerGroupSpecs"][0].update(maxReplicas="two"), "is not of type 'integer'"),
    (lambda m: m["spec"]["workerGroupSpecs"][0].pop("groupName"), "'groupName' is a required property"),
    (lambda m: m["spec"]["authOptions"].update(mode="password"), "is not one of"),
])
def test_the_validation_refuses_broken_manifests(broken, message):
    manifest = copy.deepcopy(yaml.safe_load((ROOT / "cluster/kuberay/raycluster-paper-gpu.yaml").read_text()))
    broken(manifest)
    with pytest.raises(jsonschema.ValidationError, match=message):
        validate(manifest)


def _start_params_resources(group: dict) -> dict:
    params = group["rayStartParams"]
    out = {"CPU": float(params["num-cpus"]), **({"GPU": float(params["num-gpus"])} if "num-gpus" in params else {})}
    if "resources" in params:
        out.update(json.loads(params["resources"].strip('"').replace('\\"', '"')))
    return out


@pytest.mark.parametrize("path", [p for p in MANIFESTS if p.name.startswith("rayjob-")], ids=lambda p: p.name)
def test_rayjob_entrypoint_names_an_existing_config_and_module_that_fits_the_cluster(path):
    job = yaml.safe_load(path.read_text())["spec"]
    argv = shlex.split(job["entrypoint"])
    assert argv[:2] == ["python", "-m"]
    module, config = argv[2], argv[3]
    assert importlib.util.find_spec(module) is not None
    resolve_config_path(config)
    cfg = load_config(config)
    assert job["submitterPodTemplate"]["spec"]["containers"][0]["command"][-1].endswith(job["entrypoint"])
    groups = job["rayClusterSpec"]["workerGroupSpecs"]
    head = job["rayClusterSpec"]["headGroupSpec"]
    nodes = [("head", _start_params_resources(head))]
    nodes += [(g["groupName"], _start_params_resources(g)) for g in groups for _ in range(g["maxReplicas"])]
    fit_nodes(plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster), nodes)  # PlacementError if not
    topo = topology.load(cfg.cluster.topology)
    for g in groups:  # rayStartParams and container resources are the topology's
        node = topo.worker(g["groupName"])
        assert _start_params_resources(g) == node.resources
        limits = g["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert float(limits["cpu"]) == node.resources["CPU"]
        assert float(limits.get("nvidia.com/gpu", 0)) == node.resources.get("GPU", 0)
