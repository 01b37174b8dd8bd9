"""examples/kubernetes: every manifest parses, and the fields that make the deployment safe and
operable are there (non-root, read-only root, probes, resources, drain time, the egress wall);
the embedded gateway configuration and policies load with the gateway's own strict loaders."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from gateway.configload import load_config_file
from gateway.policy.load import load_policy_file

FOLDER = Path(__file__).resolve().parent.parent / "examples" / "kubernetes"


def documents() -> list[dict]:
    docs = []
    for path in sorted(FOLDER.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def find(kind: str, name: str) -> dict:
    matches = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def gateway_container() -> dict:
    pod = find("Deployment", "agent-gateway")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "gateway")


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    files = {p.name for p in FOLDER.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


@pytest.mark.parametrize("name", ["agent-gateway", "gateway-redis"])
def test_pods_run_non_root_with_a_read_only_root(name) -> None:
    pod = find("Deployment", name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["requests"] and container["resources"]["limits"]


@pytest.mark.parametrize(
    ("probe", "path"),
    [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")],
)
def test_gateway_probes(probe, path) -> None:
    assert gateway_container()[probe]["httpGet"]["path"] == path


def test_termination_leaves_time_for_the_drain() -> None:
    pod = find("Deployment", "agent-gateway")["spec"]["template"]["spec"]
    config = yaml.safe_load(find("Secret", "gateway-config")["stringData"]["gateway.yaml"])
    pause = gateway_container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > config["server"]["shutdown_grace"] + pause


def test_config_from_a_secret_and_policies_from_a_configmap() -> None:
    pod = find("Deployment", "agent-gateway")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["secret"]["secretName"] == "gateway-config"
    assert volumes["policies"]["configMap"]["name"] == "gateway-policies"
    mounts = {m["name"]: m for m in gateway_container()["volumeMounts"]}
    assert mounts["config"]["readOnly"] and mounts["policies"]["readOnly"]
    # The audit chains need a writable place despite the read-only root.
    assert "emptyDir" in volumes["audit"] or "persistentVolumeClaim" in volumes["audit"]
    assert gateway_container()["args"] == ["serve", "--config", "/config/gateway.yaml"]


def test_embedded_config_and_policies_load(tmp_path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    for name, text in find("ConfigMap", "gateway-policies")["data"].items():
        (policies / name).write_text(text)
        load_policy_file(str(policies / name))
    text = find("Secret", "gateway-config")["stringData"]["gateway.yaml"]
    text = text.replace("/config/policies", str(policies)).replace(
        '"<printf %s \\"$TOKEN\\" | sha256sum>"', hashlib.sha256(b"t").hexdigest()
    )
    (tmp_path / "gateway.yaml").write_text(text)
    config = load_config_file(str(tmp_path / "gateway.yaml"))
    assert config.state.redis and config.state.on_failure == "closed"
    assert "{instance}" in config.audit.path
    assert config.clients and config.clients[0].limits.requests_per_minute


def test_service_hpa_and_pdb_target_the_gateway() -> None:
    service = find("Service", "agent-gateway")
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "agent-gateway"}
    assert {p["port"] for p in service["spec"]["ports"]} == {8080, 3128}
    hpa = find("HorizontalPodAutoscaler", "agent-gateway")["spec"]
    assert hpa["scaleTargetRef"]["name"] == "agent-gateway"
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]
    pdb = find("PodDisruptionBudget", "agent-gateway")["spec"]
    assert pdb["selector"]["matchLabels"] == {"app.kubernetes.io/name": "agent-gateway"}
    assert pdb["minAvailable"] >= 1


def test_redis_has_no_persistence_and_a_service() -> None:
    args = find("Deployment", "gateway-redis")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--save") + 1] == "" and args[args.index("--appendonly") + 1] == "no"
    assert find("Service", "gateway-redis")["spec"]["ports"][0]["port"] == 6379


def test_agents_can_reach_only_the_gateway_and_dns() -> None:
    policy = find("NetworkPolicy", "agents-egress-only-through-gateway")["spec"]
    assert "Egress" in policy["policyTypes"]
    targets = []
    for rule in policy["egress"]:
        for peer in rule["to"]:
            assert "ipBlock" not in peer  # no route to anything but pods named here
            targets.append(peer["podSelector"]["matchLabels"])
    assert targets == [{"app.kubernetes.io/name": "agent-gateway"}, {"k8s-app": "kube-dns"}]


def test_gateway_egress_excludes_private_ranges() -> None:
    policy = find("NetworkPolicy", "agent-gateway")["spec"]
    blocks = [p["ipBlock"] for r in policy["egress"] for p in r["to"] if "ipBlock" in p]
    assert blocks and all(
        {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(b["except"])
        for b in blocks
    )
    sources = [p for r in policy["ingress"] for p in r["from"]]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/role": "agent"}}} in sources
    redis = find("NetworkPolicy", "gateway-redis")["spec"]
    assert redis["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agent-gateway"}}}
    ]
