#!/usr/bin/env python3
"""Regenerates fuzz/corpus/<target>/seed-* from the repository's test fixtures (the seed
documents' YAML as the tests use it) and a few hand-written samples per parser.

Findings (files named finding-*) are never touched. Run from anywhere:
    python3 fuzz/seed-corpus.py
Needs PyYAML (Debian: python3-yaml) to pull the ConfigMap keys out of the fixtures.
"""
import hashlib
import json
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
CONFIG_KEYS = [
    "colocation-config", "resource-threshold-config", "resource-qos-config", "cpu-burst-config",
    "system-config", "host-application-config", "cpu-normalization-config",
    "resource-amplification-config",
]


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    name = "seed-" + hashlib.sha256(data).hexdigest()[:16]
    (d / name).write_bytes(data)


def fixtures(*globs):
    for g in globs:
        for p in sorted(ROOT.glob(g)):
            yield p, p.read_text()


def main():
    for d in CORPUS.glob("*"):
        for f in d.glob("seed-*"):
            f.unlink()
    all_yaml = list(fixtures("api/tests/fixtures/*.yaml", "e2e/src/story/seeds/*.yaml",
                             "webhook/tests/fixtures/*.yaml", "manager/tests/calc/*.yaml",
                             "koordlet/tests/fixtures/*.yaml"))
    # config: key index byte + value (see fuzz/src/api.rs)
    for _, text in all_yaml:
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
                for key, value in (doc.get("data") or {}).items():
                    if key in CONFIG_KEYS:
                        put("config", bytes([CONFIG_KEYS.index(key)]) + value.encode())
    put("config", bytes([1]) + json.dumps({
        "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 65},
        "nodeStrategies": [{"name": "pool", "nodeSelector": {"matchLabels": {"node-pool": "batch"}},
                            "cpuSuppressThresholdPercent": 50}]}).encode())
    # calc / plan: their fixtures, whole
    for path, text in all_yaml:
        if "manager/tests/calc" in str(path):
            put("calc", text)
        if "koordlet/tests/fixtures" in str(path):
            put("plan", text)
    for path, text in all_yaml:
        if "seed-001-nodemetric" in str(path):
            put("calc", text)
    # webhook: 0 mutate, 1 validate, 2.. review bodies per endpoint
    profile = (ROOT / "webhook/tests/fixtures/seed001_profile.yaml").read_text()
    for name in ["spark_pod.yaml", "seed002_be_pod.yaml"]:
        pod = (ROOT / "webhook/tests/fixtures" / name).read_text()
        ns = (ROOT / "webhook/tests/fixtures/spark_namespace.yaml").read_text()
        put("webhook", b"\x00" + f"{pod}\n---\n{ns}\n---\n{profile}".encode())
        put("webhook", b"\x01" + pod.encode())
        obj = yaml.safe_load(pod)
        for endpoint in (2, 3):
            review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                  "resource": {"group": "", "version": "v1", "resource": "pods"},
                                  "operation": "CREATE", "namespace": "default", "object": obj}}
            put("webhook", bytes([endpoint]) + json.dumps(review).encode())
    for _, text in all_yaml:
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") in ("ConfigMap", "ClusterColocationProfile"):
                endpoint = 4 if doc["kind"] == "ConfigMap" else 5
                put("webhook", b"\x01" + yaml.safe_dump(doc).encode())
                review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "request": {"uid": "u2", "kind": {"group": "", "version": "v1", "kind": doc["kind"]},
                                      "operation": "CREATE", "object": doc}}
                put("webhook", bytes([endpoint]) + json.dumps(review).encode())
    # cgroup_files: selector byte per parser (see fuzz/src/agent.rs)
    samples = {
        0: ["cache 1024\nrss 2048\ntotal_inactive_file 4096\n"],
        1: ["nr_periods 10\nnr_throttled 2\nthrottled_time 300\n",
            "usage_usec 100\nnr_periods 10\nnr_throttled 2\nthrottled_usec 3\n"],
        2: ["cache 1\nrss 2\ntotal_inactive_file 3\ntotal_active_file 4\n",
            "anon 10\nfile 20\ninactive_file 5\nactive_file 6\n"],
        3: ["MemTotal:       16384000 kB\nMemFree:         8000000 kB\nMemAvailable:    9000000 kB\n"
            "Buffers: 100 kB\nCached: 2000 kB\nActive(file): 10 kB\nInactive(file): 20 kB\n"],
        4: ["cpu  100 0 50 1000 10 0 5 0 0 0\ncpu0 50 0 25 500 5 0 2 0 0 0\nbtime 1700000000\n"],
        5: ["some avg10=0.00 avg60=0.10 avg300=0.20 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n"],
        6: ["0-3,8,10-11", ""],
        7: ["max 100000", "100000", "-1", "1024", "0-3"],
    }
    for sel, texts in samples.items():
        for t in texts:
            put("cgroup_files", bytes([sel]) + t.encode())
    for sel, t in [(0, "L3:0=fff;1=fff\nMB:0=100;1=100\n"),
                   (1, "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu rdt_a cat_l3 mba\n"),
                   (2, "resctrl /sys/fs/resctrl resctrl rw,relatime 0 0\n"), (3, "1\n22\n333\n")]:
        put("resctrl", bytes([sel]) + t.encode())
    for q in ["100m", "1.5Gi", "2", "1e3", "0.001", "128974848", "129e6", "123Mi", "-5k", "1E"]:
        put("quantity", q)
    for s in [{"matchLabels": {"node-pool": "batch"}},
              [{"matchLabels": {"a": "b"}}, {"matchExpressions": [
                  {"key": "a", "operator": "In", "values": ["b", "c"]}]}],
              {"matchExpressions": [{"key": "x", "operator": "Exists"},
                                    {"key": "y", "operator": "NotIn", "values": ["1"]}]}]:
        put("selector", json.dumps(s))
    for sel, t in [(0, "app=web,tier in (a,b),!legacy"), (0, "app!=db,env notin (prod)"),
                   (1, "metadata.name=p,status.phase!=Failed,spec.nodeName="),
                   (2, '{"metadata":{"labels":{"x":"y","app":null}}}'),
                   (3, '[{"op":"replace","path":"/spec/nodeName","value":"n2"},{"op":"add","path":"/metadata/labels/z","value":"1"}]'),
                   (4, '{"spec":{"containers":[{"name":"c","image":"busybox"}]},"metadata":{"labels":{"$patch":"replace","a":"b"}}}'),
                   (5, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels:\n    team: a\n")]:
        put("apiserver", bytes([sel]) + t.encode())
    for sel, t in [(0, "6f1e3a2b-1111-2222-3333-444455556666"), (0, "../../etc"),
                   (1, "containerd://" + "a" * 64), (1, "docker://../x"), (1, "cri-o://abc"),
                   (2, "app/sub"), (2, "../escape"), (2, "a/./b")]:
        put("cgroup_names", bytes([sel]) + t.encode())
    counts = {d.name: len(list(d.glob("*"))) for d in sorted(CORPUS.glob("*"))}
    print(json.dumps(counts))


if __name__ == "__main__":
    sys.exit(main())
