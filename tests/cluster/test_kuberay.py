"""The KubeRay manifests are generated from the topology (never hand-edited), validate against the
KubeRay v1.7.0 CRD schemas (openAPIV3Schema, with unknown fields refused as `kubectl apply
--validate=strict` refuses them), and their entrypoints name a config and a module that exist. The
RayService's serveConfigV2 is cluster/serve/selector.yaml with only the listed cluster settings changed,
parses as Serve's own deploy schema, and its import_path names a module attribute that exists."""
import copy
import dataclasses
import functools
import importlib
import importlib.util
import json
import re
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
CRDS = ROOT / "cluster" / "kuberay" / "crds"  # KubeRay v1.7.0's own CRDs (their README names the source)
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


def _cluster_spec(manifest: dict) -> dict:
    return {"RayCluster": lambda s: s, "RayJob": lambda s: s["rayClusterSpec"],
            "RayService": lambda s: s["rayClusterConfig"]}[manifest["kind"]](manifest["spec"])


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_against_the_kuberay_crd(path):
    manifest = yaml.safe_load(path.read_text())
    assert manifest["apiVersion"] == "ray.io/v1"
    validate(manifest)
    spec = _cluster_spec(manifest)
    assert spec["enableInTreeAutoscaling"] is True and spec["authOptions"]["mode"] == "token"
    groups = {g["groupName"] for g in spec["workerGroupSpecs"]}
    assert groups == ({"rollout"} if manifest["kind"] == "RayService" else {"rollout", "learner", "verifier"})


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


SERVICES = [p for p in MANIFESTS if p.name.startswith("rayservice-")]


def test_the_rayservice_is_generated():
    assert [p.name for p in SERVICES] == ["rayservice-selector.yaml"]


def test_the_validation_refuses_a_broken_rayservice():
    manifest = yaml.safe_load((ROOT / "cluster/kuberay/rayservice-selector.yaml").read_text())
    broken = copy.deepcopy(manifest)
    broken["spec"]["serveConfigV2"] = yaml.safe_load(broken["spec"]["serveConfigV2"])  # an object, not a string
    with pytest.raises(jsonschema.ValidationError, match="is not of type 'string'"):
        validate(broken)
    broken = copy.deepcopy(manifest)
    broken["spec"]["rayClusterSpec"] = broken["spec"].pop("rayClusterConfig")  # RayJob's key, not RayService's
    with pytest.raises(jsonschema.ValidationError, match="rayClusterConfig"):
        validate(broken)


def _without(config: dict, service_spec: dict) -> dict:
    """`config` with the keys serve_config_for_cluster sets replaced by those of `service_spec` (the file)."""
    out = copy.deepcopy(config)
    out["http_options"]["host"] = service_spec.get("http_options", {}).get("host")
    for app, file_app in zip(out["applications"], service_spec["applications"]):
        app["args"]["model"] = file_app["args"]["model"]
        for dep, file_dep in zip(app["deployments"], file_app["deployments"]):
            dep["ray_actor_options"] = file_dep["ray_actor_options"]
            dep["autoscaling_config"]["max_replicas"] = file_dep["autoscaling_config"]["max_replicas"]
    return out


@pytest.mark.parametrize("path", SERVICES, ids=lambda p: p.name)
def test_rayservice_serves_the_serve_config_file_on_the_gpu_group(path):
    """serveConfigV2 is the Serve config file that `serve run` reads, changed only where the cluster needs it;
    Serve's own schema accepts it; its import_path and args name what driver/serve.py has; the replicas
    serve the training RayJob's export and fit the GPU group of the topology."""
    from ray.serve.schema import ServeDeploySchema

    from core.config import ServeConfig

    manifest = yaml.safe_load(path.read_text())
    name = path.stem[len("rayservice-"):]
    serve_file, topo_name, group, config = generate.SERVICES[name]
    embedded = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    source = yaml.safe_load((ROOT / "cluster/serve" / serve_file).read_text())
    assert _without(embedded, source) == source  # nothing else differs from the file
    assert embedded["http_options"]["host"] == "0.0.0.0"
    ServeDeploySchema.model_validate(embedded) if hasattr(ServeDeploySchema, "model_validate") \
        else ServeDeploySchema.parse_obj(embedded)  # Serve's own check of what `serve deploy` is given

    cfg = load_config(config)
    spec = manifest["spec"]["rayClusterConfig"]
    topo = topology.load(topo_name)
    node = topo.worker(group)
    (worker,) = spec["workerGroupSpecs"]
    assert worker["groupName"] == group and _start_params_resources(worker) == node.resources
    assert (worker["replicas"], worker["minReplicas"], worker["maxReplicas"]) == \
        (node.replicas, node.min_replicas, node.max_replicas)
    assert _start_params_resources(spec["headGroupSpec"]) == topo.head.resources
    head_ports = spec["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
    assert {"containerPort": embedded["http_options"]["port"], "name": "serve"} in head_ports
    fields = {f.name for f in dataclasses.fields(ServeConfig)}
    for app in embedded["applications"]:
        module, _, attribute = app["import_path"].partition(":")
        assert callable(getattr(importlib.import_module(module), attribute)), app["import_path"]
        args = app["args"]
        assert set(args) - {"model", "config", "policy_version"} <= fields
        # the export of the training run (its RayJob is generated too); resolved from the image's /app
        assert args["model"] == f"{cfg.run_dir}/export" and not args["model"].startswith("/")
        assert any(config in cs for cs in generate.TARGETS.values())
        for dep in app["deployments"]:
            actor = dep["ray_actor_options"]
            need = {"CPU": actor["num_cpus"], "GPU": actor["num_gpus"], **actor.get("resources", {})}
            assert need["GPU"] >= 1 and (need["CPU"], need["GPU"]) == (cfg.rollout.num_cpus, cfg.rollout.num_gpus)
            assert need.get(cfg.cluster.rollout_node_resource), "replicas are pinned to the rollout group"
            assert not topo.head.resources.get(cfg.cluster.rollout_node_resource)  # so never on the head
            per_node = min(node.resources.get(k, 0) // v for k, v in need.items() if v > 0)
            auto = dep["autoscaling_config"]
            assert 1 <= auto["min_replicas"] <= per_node * node.replicas  # the started nodes hold the minimum
            assert auto["max_replicas"] == per_node * node.max_replicas  # the group at max holds the maximum


def _pod_templates(spec: dict) -> list:
    return [("head", spec["headGroupSpec"]["template"])] + [(g["groupName"], g["template"])
                                                             for g in spec["workerGroupSpecs"]]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_ray_pod_mounts_a_memory_backed_dev_shm(path):
    """Ray's object store, NCCL and the weight-bucket files live in /dev/shm; a pod's own is 64 MB."""
    spec = _cluster_spec(yaml.safe_load(path.read_text()))
    for group, template in _pod_templates(spec):
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        shm = [name for name, v in volumes.items() if v.get("emptyDir", {}).get("medium") == "Memory"]
        assert len(shm) == 1, f"{path.name} {group}: no memory-backed emptyDir volume"
        size = volumes[shm[0]]["emptyDir"].get("sizeLimit", "")
        assert re.fullmatch(r"\d+(Gi|Mi)", size), f"{path.name} {group}: sizeLimit {size!r}"
        limit = template["spec"]["containers"][0]["resources"]["limits"].get("memory")
        if limit:  # a memory-backed volume counts against the pod's memory: it must leave room for the rest
            to_mi = lambda q: int(q[:-2]) * (1024 if q.endswith("Gi") else 1)  # noqa: E731
            assert to_mi(size) < to_mi(limit), f"{path.name} {group}: /dev/shm {size} >= memory {limit}"
        for container in template["spec"]["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert mounts.get("/dev/shm") == shm[0], f"{path.name} {group}: {container['name']} lacks /dev/shm"
