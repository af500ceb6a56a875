#!/usr/bin/env python3
"""Validates rendered Kubernetes manifests strictly, every object or fail.

Usage: validate-manifests.py [-k VERSION]... FILE...   (FILE may be '-' for stdin)

Each YAML document is checked against its schema with unknown fields rejected (as the API
server's strict field validation does):
  - core kinds (apps/v1, v1, policy/v1, autoscaling/v2, networking.k8s.io/v1, ...):
    kubernetes-validate's strict schemas, for each Kubernetes version given with -k
    (default: 1.29.0, the first with native sidecars on by default, and 1.37.0);
  - custom resources of monitoring.coreos.com/v1 (ServiceMonitor, PodMonitor,
    PrometheusRule) and cert-manager.io/v1 (Certificate, Issuer, ClusterIssuer): the JSON
    schema of cloudcoil-models-prometheus-operator's and cloudcoil-models-cert-manager's
    models (generated from those projects' CRDs), with additionalProperties false on every
    object that lists its properties.
An object of a kind neither knows is an error, never a warning: kubernetes-validate alone
only warns about a kind it has no schema for and exits 0.

Prints one line per object and a closing summary. Exit status: 0 all valid, 1 an object
failed, 2 bad input (unreadable file, YAML that does not parse, a document with no kind),
3 a Python package this needs is not installed (deploy/tools/install-tools.sh installs it).
"""

import argparse
import sys

try:
    import jsonschema
    import kubernetes_validate
    import yaml
    from cloudcoil.models.cert_manager import v1 as cert_manager_v1
    from cloudcoil.models.prometheus_operator import v1 as monitoring_v1
except ImportError as missing:  # pragma: no cover - environment problem, said plainly
    print(f"validate-manifests: missing Python package: {missing.name} "
          "(deploy/tools/install-tools.sh installs it)", file=sys.stderr)
    sys.exit(3)

# apiVersion -> (models module, kinds checked against it)
CUSTOM = {
    "monitoring.coreos.com/v1": (monitoring_v1, ("ServiceMonitor", "PodMonitor", "PrometheusRule")),
    "cert-manager.io/v1": (cert_manager_v1, ("Certificate", "Issuer", "ClusterIssuer")),
}
DEFAULT_VERSIONS = ("1.29.0", "1.37.0")


def strict(schema):
    """Rejects unknown fields: additionalProperties false wherever properties are listed."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


_custom_validators = {}


def custom_errors(doc):
    """The schema errors of a custom resource CUSTOM knows, as 'path: message' lines."""
    api_version, kind = doc["apiVersion"], doc["kind"]
    module, kinds = CUSTOM[api_version]
    if kind not in kinds:
        return [f"no schema for {api_version} {kind}"]
    key = (api_version, kind)
    if key not in _custom_validators:
        schema = strict(getattr(module, kind).model_json_schema(by_alias=True))
        _custom_validators[key] = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in _custom_validators[key].iter_errors(doc)
    ]


def core_errors(doc, versions):
    """The strict schema errors of a core-kind object against every version."""
    errors = []
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(root)"
            errors.append(f"k8s {version}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"k8s {version}: {e.message}")
    return errors


def load(path):
    """The non-empty documents of a file ('-': stdin); exits 2 on unreadable input."""
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        docs = [d for d in yaml.safe_load_all(text) if d]
    except (OSError, yaml.YAMLError) as e:
        print(f"validate-manifests: {path}: {e}", file=sys.stderr)
        sys.exit(2)
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d or "apiVersion" not in d:
            print(f"validate-manifests: {path}: a document without kind/apiVersion: {d!r:.200}",
                  file=sys.stderr)
            sys.exit(2)
    return docs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--kubernetes-version", action="append", dest="versions")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    versions = args.versions or list(DEFAULT_VERSIONS)

    checked = core = custom = failed = 0
    for path in args.files:
        for doc in load(path):
            name = f"{doc['kind']}/{doc.get('metadata', {}).get('name', '?')}"
            if doc["apiVersion"] in CUSTOM:
                errors = custom_errors(doc)
                custom += 1
            else:
                errors = core_errors(doc, versions)
                core += 1
            checked += 1
            if errors:
                failed += 1
                for e in errors:
                    print(f"ERROR {path}: {name}: {e}")
            else:
                print(f"ok {path}: {name}")
    if checked == 0:
        print("validate-manifests: no objects in " + " ".join(args.files), file=sys.stderr)
        sys.exit(2)
    print(f"validate-manifests: {checked - failed} of {checked} objects valid "
          f"({core} core against Kubernetes {', '.join(versions)}, {custom} custom resources), "
          f"{failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
