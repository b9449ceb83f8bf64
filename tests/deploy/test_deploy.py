"""The deployment files validate and agree with each other and with `tollgate serve`.

* Every Kubernetes manifest of deploy/kubernetes and deploy/istio validates
  against the Kubernetes OpenAPI schemas (kubernetes-validate, offline),
  strictly (no unknown fields), for the oldest and newest versions it knows.
* The Dockerfile's runtime stage holds the one binary, runs as the same
  non-root user as the Deployment, exposes serve's default ports, and has no
  HEALTHCHECK; its build stage runs scripts/build-release.sh, a cargo
  release build with the locked dependencies.
* The Helm chart's values are the plain manifests' defaults, and every
  `.Values` path its templates use exists. The chart is rendered by Helm's
  own Go SDK (helm-python-sdk, offline): the rendered objects validate
  against the Kubernetes schemas, equal the plain manifests but for the
  release's names and labels, follow their values, and `values.schema.json`
  refuses bad values with an error naming them; `helm lint --strict` passes.
* Each of the chart's switches (the Redis password Secret, the HPA, the
  ServiceMonitor and PrometheusRule, the pod's scheduling and metadata,
  `env`, `extraArgs`) renders, on and off, objects that validate (the
  Prometheus Operator's, which the Kubernetes schemas lack, against the
  fields their CRDs require); the password never appears outside its
  Secret, and the variables the chart renders connect a real
  `tollgate serve` to a real Redis that requires it.

Run by scripts/test.sh as `.venv/bin/python -m unittest discover -s tests/deploy`;
TOLLGATE_BIN names the `tollgate` binary (default target/debug/tollgate).
"""

import base64
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml
from dockerfile_parse import DockerfileParser

import running
from running import tollgate_binary

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
ISTIO = ROOT / "deploy" / "istio"
CHART = ROOT / "deploy" / "helm" / "tollgate"
# The oldest and newest Kubernetes versions kubernetes-validate has schemas for.
VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]


def documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def kubernetes_files():
    """Every manifest of the plain set and the Istio examples, but kustomizations."""
    for base in (KUBERNETES, ISTIO):
        for path in sorted(base.rglob("*.yaml")):
            if path.name != "kustomization.yaml":
                yield path


def by_kind(kind, base=KUBERNETES):
    found = [
        d
        for path in sorted(base.rglob("*.yaml"))
        for d in documents(path)
        if d.get("kind") == kind
    ]
    assert len(found) >= 1, f"no {kind} under {base}"
    return found


def tollgate_deployment():
    return next(d for d in by_kind("Deployment") if d["metadata"]["name"] == "tollgate")


def serve_default_ports():
    """The gRPC and HTTP ports `tollgate serve --help` gives as defaults."""
    text = subprocess.run(
        [tollgate_binary(), "serve", "--help"], check=True, capture_output=True, text=True
    ).stdout
    grpc = re.search(r"--grpc-addr <ADDR>.*?\[default: [\d.]+:(\d+)\]", text, re.S)
    http = re.search(r"--http-addr <ADDR>.*?\[default: [\d.]+:(\d+)\]", text, re.S)
    assert grpc and http, text
    return {"grpc": int(grpc.group(1)), "http": int(http.group(1))}


def flag(args, name):
    """The value of `--name=VALUE` in a container's args."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) == 1, (name, args)
    return values[0]


def seconds(duration):
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, duration
    return int(match.group(1))


class Manifests(unittest.TestCase):
    def test_every_manifest_validates_against_the_kubernetes_schemas(self):
        checked = 0
        for path in kubernetes_files():
            for document in documents(path):
                if document["apiVersion"].startswith("networking.istio.io/"):
                    continue  # a custom resource: EnvoyFilters are checked below
                for version in VERSIONS:
                    with self.subTest(path=str(path.relative_to(ROOT)), kind=document["kind"], version=version):
                        kubernetes_validate.validate(document, version, strict=True)
                checked += 1
        self.assertGreaterEqual(checked, 7)

    def test_a_broken_manifest_is_refused(self):
        # The check above can fail: an unknown field and a wrong type are errors.
        deployment = tollgate_deployment()
        broken = yaml.safe_load(yaml.safe_dump(deployment))
        broken["spec"]["replica"] = 2
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)
        broken = yaml.safe_load(yaml.safe_dump(deployment))
        broken["spec"]["replicas"] = "two"
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)

    def test_each_kustomization_lists_what_exists(self):
        for path in sorted(ROOT.joinpath("deploy").rglob("kustomization.yaml")):
            with self.subTest(path=str(path.relative_to(ROOT))):
                for resource in documents(path)[0]["resources"]:
                    self.assertTrue((path.parent / resource).exists(), resource)
        listed = set(documents(KUBERNETES / "kustomization.yaml")[0]["resources"])
        present = {p.name for p in kubernetes_files() if p.parent == KUBERNETES}
        self.assertEqual(listed, present)

    def test_the_deployment_probes_drains_and_serves_on_serves_default_ports(self):
        deployment = tollgate_deployment()
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        self.assertEqual(ports, serve_default_ports())
        args = container["args"]
        self.assertEqual(flag(args, "grpc-addr"), f"0.0.0.0:{ports['grpc']}")
        self.assertEqual(flag(args, "http-addr"), f"0.0.0.0:{ports['http']}")
        self.assertEqual(container["livenessProbe"]["httpGet"], {"path": "/healthz", "port": "http"})
        self.assertEqual(container["readinessProbe"]["httpGet"], {"path": "/readyz", "port": "http"})
        # The kubelet sees /readyz fail within the drain delay, and the grace
        # period covers the delay plus the drain of the calls in flight.
        drain = seconds(flag(args, "drain-delay"))
        readiness = container["readinessProbe"]
        self.assertLess(readiness["periodSeconds"] * readiness["failureThreshold"], drain)
        # One lost probe never takes a replica out of rotation.
        self.assertGreaterEqual(readiness["failureThreshold"], 3)
        self.assertGreaterEqual(pod["terminationGracePeriodSeconds"], drain + 20)
        self.assertNotIn("lifecycle", container, "the drain delay is the binary's; no preStop")
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertEqual(flag(args, "expected-instances"), str(deployment["spec"]["replicas"]))
        self.assertTrue(flag(args, "store").startswith("redis://redis.tollgate.svc"))
        self.assertIn("memory", container["resources"]["limits"])

    def test_the_service_and_the_budget_select_the_pods(self):
        deployment = tollgate_deployment()
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        service = next(s for s in by_kind("Service") if s["metadata"]["name"] == "tollgate")
        self.assertLessEqual(service["spec"]["selector"].items(), labels.items())
        names = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
        self.assertEqual(names, {"grpc": "grpc", "http": "http", "metrics": "http"})
        budget = by_kind("PodDisruptionBudget")[0]
        self.assertLessEqual(budget["spec"]["selector"]["matchLabels"].items(), labels.items())
        self.assertLess(budget["spec"]["minAvailable"], deployment["spec"]["replicas"])


class Istio(unittest.TestCase):
    def filters(self):
        paths = list(ISTIO.rglob("*.yaml")) + list((ROOT / "examples" / "istio").glob("*.yaml"))
        return [d for p in paths for d in documents(p) if d.get("kind") == "EnvoyFilter"]

    def test_envoyfilters_are_well_formed(self):
        filters = self.filters()
        self.assertGreaterEqual(len(filters), 4)
        for envoy_filter in filters:
            with self.subTest(name=envoy_filter["metadata"]["name"]):
                self.assertEqual(envoy_filter["apiVersion"], "networking.istio.io/v1alpha3")
                for patch in envoy_filter["spec"]["configPatches"]:
                    self.assertIn(patch["applyTo"], {"HTTP_FILTER", "VIRTUAL_HOST"})
                    self.assertIn(patch["patch"]["operation"], {"INSERT_BEFORE", "MERGE"})
                    self.assertEqual(patch["match"]["context"], "SIDECAR_INBOUND")

    def assert_asks_tollgate(self, filter_name, envoy_grpc_of):
        """The one EnvoyFilter value named `filter_name` asks the tollgate Service, domain `edge`."""
        service = next(s for s in by_kind("Service") if s["metadata"]["name"] == "tollgate")
        grpc = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc")
        host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
        values = [
            patch["patch"]["value"]
            for f in self.filters()
            for patch in f["spec"]["configPatches"]
            if patch["patch"]["value"].get("name") == filter_name
        ]
        self.assertEqual(len(values), 1)
        envoy_grpc = envoy_grpc_of(values[0]["typed_config"])
        self.assertEqual(envoy_grpc["cluster_name"], f"outbound|{grpc}||{host}")
        self.assertEqual(envoy_grpc["authority"], host)
        self.assertEqual(values[0]["typed_config"]["domain"], "edge")

    def test_the_global_filter_asks_the_tollgate_service(self):
        self.assert_asks_tollgate(
            "envoy.filters.http.ratelimit",
            lambda config: config["rate_limit_service"]["grpc_service"]["envoy_grpc"],
        )

    def test_the_quota_filter_asks_the_tollgate_service(self):
        self.assert_asks_tollgate(
            "envoy.filters.http.rate_limit_quota",
            lambda config: config["rlqs_server"]["envoy_grpc"],
        )


class Image(unittest.TestCase):
    def setUp(self):
        self.parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
        self.stages = []
        for instruction in self.parser.structure:
            if instruction["instruction"] == "FROM":
                self.stages.append([])
            if self.stages:
                self.stages[-1].append(instruction)

    def instructions(self, stage, name):
        return [i["value"] for i in stage if i["instruction"] == name]

    def test_the_runtime_stage_is_one_binary_a_non_root_user_and_serves_ports(self):
        self.assertEqual(len(self.stages), 2)
        runtime = self.stages[-1]
        self.assertIn("distroless", self.instructions(runtime, "FROM")[0])
        self.assertEqual(
            self.instructions(runtime, "COPY"), ["--from=build /out/tollgate /usr/local/bin/tollgate"]
        )
        self.assertEqual(self.instructions(runtime, "ENTRYPOINT"), ['["/usr/local/bin/tollgate"]'])
        self.assertNotIn("HEALTHCHECK", [i["instruction"] for i in self.parser.structure])
        self.assertNotIn("RUN", [i["instruction"] for i in runtime], "no shell in the runtime image")
        user = self.instructions(runtime, "USER")
        self.assertEqual(len(user), 1)
        uid, _, gid = user[0].partition(":")
        self.assertNotIn(uid, {"0", "root"})
        pod = tollgate_deployment()["spec"]["template"]["spec"]["securityContext"]
        self.assertEqual((int(uid), int(gid)), (pod["runAsUser"], pod["runAsGroup"]))
        exposed = {int(p) for v in self.instructions(runtime, "EXPOSE") for p in v.split()}
        self.assertEqual(exposed, set(serve_default_ports().values()))
        cmd = self.instructions(runtime, "CMD")[0]
        for port in exposed:
            self.assertIn(f"0.0.0.0:{port}", cmd)

    def test_the_build_stage_runs_the_release_script_with_locked_dependencies(self):
        build = self.stages[0]
        self.assertIn("AS build", self.instructions(build, "FROM")[0])
        self.assertEqual(self.instructions(build, "RUN"), ["scripts/build-release.sh /out/tollgate"])
        script = ROOT / "scripts" / "build-release.sh"
        subprocess.run(["bash", "-n", str(script)], check=True)
        cargo = [l.strip() for l in script.read_text().splitlines() if l.strip().startswith("cargo ")]
        self.assertEqual(cargo, ["cargo build --release --locked -p tollgate --bin tollgate"])
        ignored = (ROOT / ".dockerignore").read_text().split()
        for needed in ("Cargo.lock", "crates/", "scripts/"):
            self.assertNotIn(needed, ignored)
        self.assertIn("target/", ignored)


class Chart(unittest.TestCase):
    def setUp(self):
        self.values = documents(CHART / "values.yaml")[0]

    def test_the_charts_defaults_are_the_plain_manifests(self):
        deployment = tollgate_deployment()
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        image = f"{self.values['image']['repository']}:{self.values['image']['tag']}"
        self.assertEqual(image, container["image"])
        self.assertEqual(self.values["replicas"], deployment["spec"]["replicas"])
        self.assertEqual(
            {k: v for k, v in self.values["ports"].items() if k != "metrics"},
            {p["name"]: p["containerPort"] for p in container["ports"]},
        )
        service = next(s for s in by_kind("Service") if s["metadata"]["name"] == "tollgate")
        metrics = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "metrics")
        self.assertEqual(self.values["ports"]["metrics"], metrics)
        self.assertEqual(self.values["drainDelay"], flag(container["args"], "drain-delay"))
        self.assertEqual(self.values["logFormat"], flag(container["args"], "log-format"))
        self.assertEqual(
            str(self.values["expectedInstances"]), flag(container["args"], "expected-instances")
        )
        self.assertEqual(self.values["terminationGracePeriodSeconds"], pod["terminationGracePeriodSeconds"])
        self.assertEqual(self.values["resources"], container["resources"])
        budget = by_kind("PodDisruptionBudget")[0]
        self.assertEqual(self.values["podDisruptionBudget"]["minAvailable"], budget["spec"]["minAvailable"])
        redis = next(d for d in by_kind("Deployment") if d["metadata"]["name"] == "redis")
        self.assertEqual(self.values["redis"]["image"], redis["spec"]["template"]["spec"]["containers"][0]["image"])
        configmap = by_kind("ConfigMap")[0]
        self.assertEqual(self.values["limits"], configmap["data"])
        shipped = (ROOT / "examples" / "limits" / "example.yaml").read_text()
        self.assertEqual(self.values["limits"]["example.yaml"], shipped)

    def test_every_value_a_template_uses_exists(self):
        used = set()
        for template in (CHART / "templates").iterdir():
            used |= set(re.findall(r"\.Values((?:\.[A-Za-z]+)+)", template.read_text()))
        self.assertGreaterEqual(len(used), 10)
        for path in sorted(used):
            node = self.values
            for key in path.strip(".").split("."):
                with self.subTest(value=path):
                    self.assertIn(key, node)
                node = node[key]
        chart = documents(CHART / "Chart.yaml")[0]
        self.assertEqual(chart["apiVersion"], "v2")
        self.assertEqual(chart["appVersion"], self.values["image"]["tag"])



def render(values=None, name="tollgate", namespace="tollgate"):
    """The chart's objects as Helm installs them, by (kind, name)."""
    chart = helm.Chart.load(str(CHART))
    manifests = chart.render(values or {}, name=name, namespace=namespace, is_install=True)
    objects = {}
    for path, text in manifests.items():
        if not path.endswith(".yaml"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                objects[(document["kind"], document["metadata"]["name"])] = document
    return objects


def without_release(document):
    """A copy without what the release adds: its instance label, the limits
    checksum and the namespace (the plain manifests set it, Helm passes it)."""
    copy = yaml.safe_load(yaml.safe_dump(document))

    def strip(metadata):
        metadata.pop("namespace", None)
        labels = metadata.get("labels", {})
        labels.pop("app.kubernetes.io/instance", None)
        if not labels:
            metadata.pop("labels", None)
        annotations = metadata.get("annotations", {})
        annotations.pop("checksum/limits", None)
        if not annotations:
            metadata.pop("annotations", None)

    strip(copy["metadata"])
    spec = copy.get("spec", {})
    spec.get("selector", {}).get("matchLabels", {}).pop("app.kubernetes.io/instance", None)
    if copy["kind"] == "Service":
        spec["selector"].pop("app.kubernetes.io/instance", None)
    if "template" in spec:
        strip(spec["template"]["metadata"])
    return copy


class RenderedChart(unittest.TestCase):
    def test_the_rendered_chart_validates_against_the_kubernetes_schemas(self):
        for values in ({}, {"redis": {"enabled": False}, "store": "memory"}):
            objects = render(values)
            self.assertGreaterEqual(len(objects), 4)
            for (kind, name), document in objects.items():
                for version in VERSIONS:
                    with self.subTest(values=values, kind=kind, name=name, version=version):
                        kubernetes_validate.validate(document, version, strict=True)

    def test_helm_lint_strict_finds_no_error_or_warning(self):
        report = helm.lint(str(CHART), strict=True)
        self.assertEqual(report["errors"], [])
        serious = [m for m in report["messages"] if m["severity"] >= 2]
        self.assertEqual(serious, [], report)

    def test_with_its_defaults_the_chart_renders_the_plain_manifests(self):
        rendered = render()
        plain = {
            (d["kind"], d["metadata"]["name"]): d
            for path in kubernetes_files()
            if path.parent == KUBERNETES
            for d in documents(path)
        }
        # The demo Redis is named for the release; the rest by the same names.
        for key in [("ConfigMap", "tollgate-limits"), ("Deployment", "tollgate"),
                    ("Service", "tollgate"), ("PodDisruptionBudget", "tollgate")]:
            with self.subTest(object=key):
                ours, theirs = without_release(rendered[key]), without_release(plain[key])
                if key == ("Deployment", "tollgate"):
                    for document in (ours, theirs):
                        args = document["spec"]["template"]["spec"]["containers"][0]["args"]
                        store = next(i for i, a in enumerate(args) if a.startswith("--store="))
                        args[store] = "--store=<the demo Redis>"
                self.assertEqual(ours, theirs)
        store = flag(rendered[("Deployment", "tollgate")]["spec"]["template"]["spec"]["containers"][0]["args"], "store")
        self.assertEqual(store, "redis://tollgate-redis.tollgate.svc.cluster.local:6379")
        self.assertIn(("Service", "tollgate-redis"), rendered)

    def test_the_rendered_objects_follow_the_values(self):
        objects = render(
            {
                "replicas": 4,
                "expectedInstances": 4,
                "store": "redis-cluster://a:7000,b:7000",
                "redis": {"enabled": False},
                "ports": {"grpc": 9081, "http": 9080},
                "drainDelay": "10s",
                "terminationGracePeriodSeconds": 45,
            },
            name="rl",
            namespace="edge",
        )
        self.assertNotIn(("Deployment", "rl-redis"), objects)
        deployment = objects[("Deployment", "rl")]
        self.assertEqual(deployment["spec"]["replicas"], 4)
        pod = deployment["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        self.assertEqual(flag(args, "store"), "redis-cluster://a:7000,b:7000")
        self.assertEqual(flag(args, "expected-instances"), "4")
        self.assertEqual(flag(args, "grpc-addr"), "0.0.0.0:9081")
        self.assertEqual(flag(args, "drain-delay"), "10s")
        self.assertEqual(pod["terminationGracePeriodSeconds"], 45)
        self.assertEqual(pod["volumes"][0]["configMap"]["name"], "rl-limits")
        self.assertIn(("ConfigMap", "rl-limits"), objects)
        service = objects[("Service", "rl")]
        self.assertEqual({p["name"]: p["port"] for p in service["spec"]["ports"]},
                         {"grpc": 9081, "http": 9080, "metrics": 9090})
        # Without a store and without the demo Redis each pod counts alone.
        memory = render({"redis": {"enabled": False}})
        args = memory[("Deployment", "tollgate")]["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(flag(args, "store"), "memory")

    def test_a_change_of_limits_rolls_the_pods(self):
        def checksum(values):
            deployment = render(values)[("Deployment", "tollgate")]
            return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/limits"]

        other = {"limits": {"other.yaml": "domain: other\ndescriptors: []\n"}}
        self.assertNotEqual(checksum({}), checksum(other))
        self.assertEqual(checksum({}), checksum({}))

    def test_the_rendered_limits_load_in_tollgate_validate(self):
        configmap = render()[("ConfigMap", "tollgate-limits")]
        with tempfile.TemporaryDirectory() as directory:
            for name, text in configmap["data"].items():
                Path(directory, name).write_text(text)
            subprocess.run([tollgate_binary(), "validate", directory], check=True, capture_output=True)

    def test_bad_values_are_refused_naming_the_value(self):
        for values, named in [
            ({"replicas": "two"}, "/replicas"),
            ({"replica": 3}, "replica"),
            ({"store": "mysql://db"}, "/store"),
            ({"ports": {"grpc": 70000}}, "/ports/grpc"),
            ({"logFormat": "xml"}, "/logFormat"),
            ({"drainDelay": "soon"}, "/drainDelay"),
            ({"redis": {"enabled": "yes"}}, "/redis/enabled"),
            ({"env": [{"name": "LEVEL", "value": 3}]}, "/env/0/value"),
            ({"env": {"LEVEL": "warn"}}, "/env"),
            ({"extraArgs": ["lease-period=1s"]}, "/extraArgs/0"),
            ({"extraVolumeMounts": [{"name": "ca"}]}, "/extraVolumeMounts/0"),
            ({"extraVolumes": [{"name": "ca"}]}, "/extraVolumes/0"),
            ({"redis": {"auth": {"password": 1234}}}, "/redis/auth/password"),
            ({"redis": {"auth": {"passwd": "x"}}}, "passwd"),
            ({"hpa": {"enabled": "true"}}, "/hpa/enabled"),
            ({"hpa": {"maxReplicas": 0}}, "/hpa/maxReplicas"),
            ({"serviceMonitor": {"interval": "often"}}, "/serviceMonitor/interval"),
            ({"prometheusRule": {"enabled": 1}}, "/prometheusRule/enabled"),
            ({"podLabels": {"team": 7}}, "/podLabels/team"),
            ({"nodeSelector": ["linux"]}, "/nodeSelector"),
            ({"tolerations": [{"operator": "Maybe"}]}, "/tolerations/0/operator"),
            ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "/topologySpreadConstraints/0"),
            ({"affinity": {"nodeAfinity": {}}}, "nodeAfinity"),
            ({"resources": {"limit": {"memory": "1Gi"}}}, "limit"),
            ({"resources": {"limits": {"memory": "lots"}}}, "/resources/limits/memory"),
        ]:
            with self.subTest(values=values):
                with self.assertRaises(helm.HelmValuesError) as refused:
                    render(values)
                self.assertIn(named, str(refused.exception))


# A password with the characters a URL or `user:password` would trip on.
SECRET = "s3cret:p@ss/w%rd +x"

# Every switch of the chart on.
ALL_ON = {
    "redis": {"auth": {"password": SECRET}},
    "hpa": {"enabled": True, "minReplicas": 2, "maxReplicas": 6},
    "expectedInstances": 6,
    "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
    "env": [
        {"name": "TOLLGATE_LOG_LEVEL", "value": "warn"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ],
    "extraArgs": ["--lease-period=100ms"],
    "extraVolumes": [{"name": "redis-ca", "secret": {"secretName": "redis-ca"}}],
    "extraVolumeMounts": [{"name": "redis-ca", "mountPath": "/etc/redis-ca", "readOnly": True}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "tollgate"}}}}]}},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "tollgate"}}}],
    "podAnnotations": {"example.com/team": "edge"},
    "podLabels": {"team": "edge"},
    "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
}


def switch_variants():
    """No switch, all of them, and each alone (the HPA with the instances it needs)."""
    yield {}
    yield ALL_ON
    for key, value in ALL_ON.items():
        if key != "expectedInstances":
            yield {key: value, **({"expectedInstances": 6} if key == "hpa" else {})}
    yield {"redis": {"auth": {"existingSecret": "redis-credentials", "existingSecretKey": "pw"}}}
    yield {"redis": {"enabled": False, "auth": {"password": SECRET, "username": "tollgate"}},
           "store": "redis-sentinel://mymaster@s1:26379,s2:26379"}


# The Prometheus Operator's Duration (its CRDs' pattern for interval, scrapeTimeout, for).
OPERATOR_DURATION = r"0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?"


def string_map(test, value):
    test.assertIsInstance(value, dict)
    for k, v in value.items():
        test.assertIsInstance(k, str)
        test.assertIsInstance(v, str)


def check_operator_object(test, document):
    """The fields the ServiceMonitor and PrometheusRule CRDs (monitoring.coreos.com/v1) require, with their types."""
    test.assertEqual(document["apiVersion"], "monitoring.coreos.com/v1")
    test.assertEqual(set(document), {"apiVersion", "kind", "metadata", "spec"})
    test.assertRegex(document["metadata"]["name"], r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    string_map(test, document["metadata"]["labels"])
    spec = document["spec"]
    if document["kind"] == "ServiceMonitor":
        test.assertLessEqual(set(spec), {"selector", "namespaceSelector", "endpoints"})
        string_map(test, spec["selector"]["matchLabels"])
        test.assertTrue(all(isinstance(n, str) for n in spec["namespaceSelector"]["matchNames"]))
        test.assertGreaterEqual(len(spec["endpoints"]), 1)
        for endpoint in spec["endpoints"]:
            test.assertLessEqual(set(endpoint), {"port", "path", "interval", "scrapeTimeout"})
            test.assertIsInstance(endpoint["port"], str)
            for field in ("interval", "scrapeTimeout"):
                test.assertRegex(endpoint[field], f"^({OPERATOR_DURATION})$")
    else:
        test.assertEqual(document["kind"], "PrometheusRule")
        test.assertEqual(set(spec), {"groups"})
        for group in spec["groups"]:
            test.assertIsInstance(group["name"], str)
            for rule in group["rules"]:
                test.assertEqual(len({"alert", "record"} & set(rule)), 1, rule)
                test.assertIsInstance(rule["expr"], str)
                if "for" in rule:
                    test.assertRegex(rule["for"], f"^({OPERATOR_DURATION})$")
                for field in ("labels", "annotations"):
                    string_map(test, rule.get(field, {}))
        # The groups are what Prometheus itself loads.
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as rules:
            yaml.safe_dump(spec, rules)
            rules.flush()
            subprocess.run(["promtool", "check", "rules", rules.name], check=True, capture_output=True)


def tollgate_container(objects, name="tollgate"):
    return objects[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]


def container_env(container, secrets):
    """The container's environment as the kubelet makes it: `secrets` resolved, `$(VAR)` expanded."""
    env = {}
    for variable in container.get("env", []):
        if "valueFrom" in variable:
            reference = variable["valueFrom"]["secretKeyRef"]
            value = base64.b64decode(secrets[reference["name"]]["data"][reference["key"]]).decode()
        else:
            value = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                           lambda m: env.get(m.group(1), m.group(0)), variable["value"])
        env[variable["name"]] = value
    return env


class ChartSwitches(unittest.TestCase):
    def test_each_switch_on_and_off_renders_objects_that_validate(self):
        kinds = set()
        for values in switch_variants():
            objects = render(values)
            for (kind, name), document in objects.items():
                kinds.add(kind)
                with self.subTest(values=sorted(values), kind=kind, name=name):
                    if document["apiVersion"].startswith("monitoring.coreos.com/"):
                        check_operator_object(self, document)
                        continue
                    for version in VERSIONS:
                        kubernetes_validate.validate(document, version, strict=True)
        self.assertLessEqual({"HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule", "Secret"}, kinds)

    def test_the_switches_are_off_by_default(self):
        objects = render()
        kinds = {kind for kind, _ in objects}
        for kind in ("HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule", "Secret"):
            self.assertNotIn(kind, kinds)
        deployment = objects[("Deployment", "tollgate")]
        self.assertEqual(deployment["spec"]["replicas"], 2)
        pod = deployment["spec"]["template"]["spec"]
        for field in ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints"):
            self.assertNotIn(field, pod)
        self.assertNotIn("env", pod["containers"][0])
        self.assertEqual([v["name"] for v in pod["volumes"]], ["limits"])

    def test_the_hpa_scales_the_deployment_and_takes_its_replicas(self):
        objects = render({"hpa": {"enabled": True, "minReplicas": 3, "maxReplicas": 8,
                                  "targetCPUUtilizationPercentage": 70},
                          "expectedInstances": 8}, name="rl")
        deployment = objects[("Deployment", "rl")]
        self.assertNotIn("replicas", deployment["spec"], "the HPA sets the replicas")
        hpa = objects[("HorizontalPodAutoscaler", "rl")]
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        self.assertEqual(hpa["spec"]["scaleTargetRef"], {"apiVersion": "apps/v1", "kind": "Deployment", "name": "rl"})
        self.assertEqual((hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]), (3, 8))
        self.assertEqual(hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 70)
        self.assertIn("cpu", deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"])
        # More pods than expectedInstances would each allow limit / expectedInstances
        # on `on_store_error: local`: refused, naming both values.
        for values, named in [
            ({"hpa": {"enabled": True, "maxReplicas": 8}, "expectedInstances": 4}, "hpa.maxReplicas (8) is more than expectedInstances (4)"),
            ({"hpa": {"enabled": True, "minReplicas": 5, "maxReplicas": 4}, "expectedInstances": 4}, "hpa.minReplicas (5) is more than hpa.maxReplicas (4)"),
        ]:
            with self.subTest(values=values):
                with self.assertRaises(helm.HelmRenderError) as refused:
                    render(values)
                self.assertIn(named, str(refused.exception))

    def test_the_service_monitor_scrapes_the_services_metrics_port(self):
        objects = render({"serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "5s",
                                             "labels": {"release": "kps"}}}, name="rl", namespace="edge")
        monitor = objects[("ServiceMonitor", "rl")]
        self.assertEqual(monitor["metadata"]["labels"]["release"], "kps")
        selector = monitor["spec"]["selector"]["matchLabels"]
        selected = [key for key, document in objects.items() if key[0] == "Service"
                    and selector.items() <= document["metadata"].get("labels", {}).items()]
        self.assertEqual(selected, [("Service", "rl")], "the Tollgate Service only, not the demo Redis")
        self.assertEqual(monitor["spec"]["namespaceSelector"]["matchNames"], ["edge"])
        endpoint = monitor["spec"]["endpoints"][0]
        ports = {p["name"]: p for p in objects[("Service", "rl")]["spec"]["ports"]}
        self.assertEqual(ports[endpoint["port"]]["targetPort"], "http", "the HTTP listener serves /metrics")
        self.assertEqual((endpoint["path"], endpoint["interval"], endpoint["scrapeTimeout"]), ("/metrics", "15s", "5s"))

    def test_the_prometheus_rule_holds_the_shipped_alert_rules(self):
        objects = render({"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}})
        rule = objects[("PrometheusRule", "tollgate")]
        shipped = documents(ROOT / "deploy" / "monitoring" / "tollgate-alerts.yaml")[0]
        self.assertEqual(rule["spec"], shipped)
        self.assertEqual(rule["metadata"]["labels"]["release"], "kps")

    def test_the_pod_values_reach_the_pod(self):
        values = {key: ALL_ON[key] for key in ("env", "extraArgs", "nodeSelector", "affinity", "tolerations",
                                               "topologySpreadConstraints", "podAnnotations", "resources",
                                               "extraVolumes", "extraVolumeMounts")}
        # A pod label may not take over the selector's.
        values["podLabels"] = {"team": "edge", "app.kubernetes.io/name": "other"}
        deployment = render(values)[("Deployment", "tollgate")]
        template = deployment["spec"]["template"]
        pod = template["spec"]
        for field in ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints"):
            self.assertEqual(pod[field], values[field])
        self.assertEqual(template["metadata"]["labels"]["team"], "edge")
        self.assertEqual(template["metadata"]["labels"]["app.kubernetes.io/name"], "tollgate")
        self.assertNotIn("team", deployment["spec"]["selector"]["matchLabels"])
        self.assertEqual(template["metadata"]["annotations"]["example.com/team"], "edge")
        self.assertIn("checksum/limits", template["metadata"]["annotations"])
        container = pod["containers"][0]
        self.assertEqual(container["env"], values["env"])
        self.assertEqual(container["args"][-1], "--lease-period=100ms", "after the chart's own flags")
        self.assertEqual(container["resources"], values["resources"])
        self.assertEqual(pod["volumes"][1:], values["extraVolumes"], "beside the limits")
        self.assertEqual(container["volumeMounts"][1:], values["extraVolumeMounts"])

    def test_the_redis_password_is_only_in_its_secret(self):
        objects = render({"redis": {"auth": {"password": SECRET}}})
        secret = objects[("Secret", "tollgate-redis-auth")]
        self.assertEqual(base64.b64decode(secret["data"]["password"]).decode(), SECRET)
        encoded = base64.b64encode(SECRET.encode()).decode()
        for key, document in objects.items():
            if key[0] != "Secret":
                text = yaml.safe_dump(document)
                with self.subTest(object=key):
                    self.assertNotIn(SECRET, text)
                    self.assertNotIn(encoded, text)
        container = tollgate_container(objects)
        self.assertFalse([a for a in container["args"] if a.startswith("--store")], "the store is REDIS_* now")
        env = container_env(container, {"tollgate-redis-auth": secret})
        self.assertEqual(env["REDIS_AUTH"], f":{SECRET}")
        self.assertEqual(env["REDIS_URL"], "tollgate-redis.tollgate.svc.cluster.local:6379")
        # The demo Redis requires the same password.
        redis = tollgate_container(objects, "tollgate-redis")
        self.assertEqual(redis["args"][-2:], ["--requirepass", "$(REDIS_PASSWORD)"])
        self.assertEqual(container_env(redis, {"tollgate-redis-auth": secret})["REDIS_PASSWORD"], SECRET)
        # A Secret of one's own: referenced, not made.
        objects = render({"redis": {"auth": {"existingSecret": "redis-credentials", "existingSecretKey": "pw"}}})
        self.assertNotIn("Secret", {kind for kind, _ in objects})
        reference = tollgate_container(objects)["env"][0]["valueFrom"]["secretKeyRef"]
        self.assertEqual(reference, {"name": "redis-credentials", "key": "pw"})

    def test_redis_auth_passes_each_store_form_as_upstreams_variables(self):
        secrets = {"tollgate-redis-auth": {"data": {"password": base64.b64encode(b"pw").decode()}}}
        for store, username, expected in [
            ("redis://r:6379/2", "", {"REDIS_TYPE": "single", "REDIS_URL": "r:6379/2", "REDIS_TLS": "false", "REDIS_AUTH": ":pw"}),
            ("rediss://r:6380", "app", {"REDIS_TYPE": "single", "REDIS_URL": "r:6380", "REDIS_TLS": "true", "REDIS_AUTH": "app:pw"}),
            ("redis-cluster://a:7000,b:7000", "", {"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7000", "REDIS_TLS": "false"}),
            ("redis-sentinel://mymaster@s1:26379,s2:26379", "", {"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379"}),
            ("rediss-cluster://a:7000", "", {"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000", "REDIS_TLS": "true"}),
            ("rediss-sentinel://m@s1:26379", "", {"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1:26379", "REDIS_TLS": "true"}),
        ]:
            with self.subTest(store=store):
                objects = render({"store": store, "redis": {"enabled": False, "auth": {"password": "pw", "username": username}}})
                env = container_env(tollgate_container(objects), secrets)
                self.assertLessEqual(expected.items(), env.items())
                self.assertEqual(env["REDIS_SOCKET_TYPE"], "tcp")
        for store, named in [("memory", "redis.auth needs a redis://"),
                             ("redis://user:other@r:6379", "store must not hold credentials")]:
            with self.subTest(store=store):
                with self.assertRaises(helm.HelmRenderError) as refused:
                    render({"store": store, "redis": {"enabled": False, "auth": {"password": "pw"}}})
                self.assertIn(named, str(refused.exception))

    def serve_as_rendered(self, redis, password):
        """`tollgate serve` with the args and environment the chart renders for `redis`, the Secret holding `password`."""
        objects = render({"store": f"redis://127.0.0.1:{redis.port}",
                          "redis": {"enabled": False, "auth": {"password": password}}})
        secrets = {name: document for (kind, name), document in objects.items() if kind == "Secret"}
        container = tollgate_container(objects)
        directory = tempfile.mkdtemp()
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", directory], check=True))
        for name, text in objects[("ConfigMap", "tollgate-limits")]["data"].items():
            Path(directory, name).write_text(text)
        args = [f"--config={directory}" if a.startswith("--config=") else a
                for a in container["args"][1:] if not a.startswith(("--grpc-addr=", "--http-addr="))]
        return running.Serve(args, container_env(container, secrets))

    def test_the_rendered_redis_auth_connects_serve_to_a_redis_requiring_it(self):
        login = '{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/login"}]}]}'
        with running.Redis(password=SECRET) as redis:
            with self.serve_as_rendered(redis, SECRET) as serve:
                # /login allows 3 a minute, counted in Redis.
                self.assertEqual([serve.check(login) for _ in range(4)], [200, 200, 200, 429])
                self.assertGreaterEqual(int(redis.cli("DBSIZE")), 1)
                self.assertNotIn(SECRET, serve.output())
            # The control: a Secret with another password does not get in.
            with self.assertRaises(AssertionError) as refused:
                with self.serve_as_rendered(redis, "not-the-password"):
                    pass
            self.assertRegex(str(refused.exception), "(?i)auth|password")


if __name__ == "__main__":
    unittest.main()
