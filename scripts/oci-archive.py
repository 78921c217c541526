#!/usr/bin/env python3
"""Pack a root filesystem directory into a single-layer OCI image archive, without a registry.

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) that also carries a
Docker-style manifest.json, so `ctr images import`, `kind load image-archive` and
`docker load` all accept it. Every file in the layer is owned by root and dated 1970, so the
same binaries always give the same image digest.

usage: oci-archive.py ROOTFS IMAGE_REF OUTPUT.tar --entrypoint /bin [--user 65532] [--workdir /]
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def layer_tar(rootfs: str) -> bytes:
    """An uncompressed tar of `rootfs`, sorted, root-owned, with fixed timestamps."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = []
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in dirnames + sorted(filenames):
                entries.append(os.path.join(dirpath, name))
        for path in sorted(entries):
            arcname = os.path.relpath(path, rootfs)
            info = tar.gettarinfo(path, arcname)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if info.isfile():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rootfs")
    parser.add_argument("image_ref", help="e.g. koordinator-rs/koord-manager:0.1.0")
    parser.add_argument("output")
    parser.add_argument("--entrypoint", required=True, action="append")
    parser.add_argument("--user", default="0")
    parser.add_argument("--workdir", default="/")
    args = parser.parse_args()

    if not os.path.isdir(args.rootfs):
        print(f"error: {args.rootfs} is not a directory", file=sys.stderr)
        return 2
    if ":" not in args.image_ref.rsplit("/", 1)[-1]:
        print(f"error: image reference {args.image_ref} has no tag", file=sys.stderr)
        return 2

    raw = layer_tar(args.rootfs)
    diff_id = sha256(raw)
    layer = gzip.compress(raw, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": args.entrypoint,
            "User": args.user,
            "WorkingDir": args.workdir,
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/oci-archive.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": sha256(layer),
                "size": len(layer),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    ref = args.image_ref
    # containerd and kind name the image after this annotation; the short tag is for OCI tools.
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": sha256(manifest_bytes),
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
                },
            }
        ],
    }
    blob = lambda data: "blobs/sha256/" + hashlib.sha256(data).hexdigest()  # noqa: E731
    docker_manifest = [
        {
            "Config": blob(config_bytes),
            "RepoTags": [ref],
            "Layers": [blob(layer)],
        }
    ]
    tmp = args.output + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        add_bytes(out, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes(out, "index.json", json.dumps(index, sort_keys=True).encode())
        add_bytes(out, "manifest.json", json.dumps(docker_manifest).encode())
        for data in (config_bytes, manifest_bytes, layer):
            add_bytes(out, blob(data), data)
    os.replace(tmp, args.output)
    print(f"{ref} {sha256(manifest_bytes)} {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
