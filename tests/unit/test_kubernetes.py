"""deploy/kubernetes/ (issue 34): the kustomize base and the example overlay
build with kubectl's kustomize, validate strictly against a current
Kubernetes's schemas (kubernetes-validate), and agree with the ScalWS
configuration they carry: probes on the status port at /ready and /live,
the ports the sites listen on, workers = the CPU limit, a grace period
longer than shutdown_timeout plus the preStop delay, a ConfigMap name
without a hash suffix (watch_config reloads it in place)."""
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from scalws.config.loader import load_config_text
from scalws.config.units import parse_duration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUBE = os.path.join(ROOT, "deploy", "kubernetes")
K8S_VERSION = "1.34.0"

pytestmark = pytest.mark.skipif(not shutil.which("kubectl"),
                                reason="kubectl not installed (make sysdeps installs kubernetes-client)")


def build(where):
    r = subprocess.run(["kubectl", "kustomize", os.path.join(KUBE, where)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.fixture(scope="module", params=["base", "overlays/example"])
def docs(request):
    return request.param, {d["kind"]: d for d in build(request.param)}


def test_every_resource_is_valid_for_a_current_kubernetes(docs):
    import kubernetes_validate
    where, by_kind = docs
    assert set(by_kind) == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
                            "HorizontalPodAutoscaler", "NetworkPolicy"}, where
    for doc in by_kind.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_wrong_field_is_caught():
    """The validation is not a formality: an unknown field fails it."""
    import kubernetes_validate
    dep = {d["kind"]: d for d in build("base")}["Deployment"]
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


def _config(by_kind):
    return yaml.safe_load(by_kind["ConfigMap"]["data"]["scalws.yaml"]), \
        by_kind["ConfigMap"]["data"]["scalws.yaml"]


def test_the_deployment_agrees_with_its_configuration(docs):
    where, by_kind = docs
    raw, text = _config(by_kind)
    pod = by_kind["Deployment"]["spec"]["template"]
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(raw["status"]["listen"].rsplit(":", 1)[1]) == ports["status"]
    assert int(raw["sites"][0]["listen"].rsplit(":", 1)[1]) == ports["http"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "status"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/live", "port": "status"}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["status"])
    # `auto` would count the node's CPUs, not the container's share
    assert raw["workers"] == int(c["resources"]["limits"]["cpu"]), where
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["spec"]["terminationGracePeriodSeconds"] > \
        parse_duration(raw["shutdown_timeout"]) + pre_stop
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert parse_duration(raw["watch_config"]) > 0
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert c["args"] == ["--config", mounts["config"] + "/scalws.yaml"]
    volume = {v["name"]: v for v in pod["spec"]["volumes"]}["config"]
    assert volume["configMap"]["name"] == by_kind["ConfigMap"]["metadata"]["name"] == "scalws-config"


def test_the_configuration_checks(docs, tmp_path):
    """scalwsd --check-config on the ConfigMap's file. The example's
    upstream is a cluster DNS name and the peers' secret a Secret's file:
    outside a cluster those, and only those, are refused (the peers' name
    is a warning)."""
    where, by_kind = docs
    _, text = _config(by_kind)
    path = tmp_path / "scalws.yaml"
    path.write_text(text)
    r = subprocess.run([sys.executable, "-m", "scalws", "--check-config", str(path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    errors = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith(str(path))]
    if where == "base":
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        # (the peers' name that does not resolve is a warning: the first pod
        # starts before its headless Service lists it)
        assert len(errors) == 2, r.stdout + r.stderr
        assert "cannot resolve 'backend.example.svc.cluster.local'" in errors[0]
        assert "cannot read /etc/scalws-peers/secret" in errors[1]
        # with the names replaced by addresses and the secret by a file, the
        # rest is a valid configuration
        secret = tmp_path / "secret"
        secret.write_text("0123456789abcdef0123\n")
        secret.chmod(0o400)
        load_config_text(text.replace("backend.example.svc.cluster.local", "127.0.0.1")
                         .replace("scalws-peers.example.svc.cluster.local", "127.0.0.2")
                         .replace("/etc/scalws-peers/secret", str(secret)),
                         str(path), str(tmp_path))
