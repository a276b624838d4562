"""A Gitaly stand-in serving gitaly.RepositoryService/RemoveRepository on 127.0.0.1
(grpcio), run by tests/sinks/gitaly.rs.

Usage: gitaly_stub.py DIR

No Gitaly binary is published in a package registry. This stub decodes the requests
with messages generated at start (grpc_tools.protoc, into a temporary directory) from
Gitaly's own published .proto files, Debian's golang-gitaly-proto-dev package
(HK_GITALY_PROTO_DIR, by default its install path), not from the project's subset: a
client that encodes the request wrongly sees wrong storage names or paths here.
That package (gitaly-proto 1.37) predates RemoveRepository, whose request in current
Gitaly (proto/repository.proto) is `RemoveRepositoryRequest { Repository repository
= 1; }`: the wire twin of the package's `RepositoryExistsRequest { Repository
repository = 1; }`, which decodes it; the response is the empty message.

DIR holds:
  config.json    {"storages": ["default", ...], "token": "secret" | null} (given);
  storages/NAME  the root of storage NAME; a repository is a directory under it;
  calls.jsonl    one JSON object a line per call, appended and flushed before the
                 answer: {"storage", "relative_path", "gl_repository", "authorized"
                 (true/false, null when no token is configured), "code", "message"};
  port           the port it listens on, written (atomically) once it listens.

Answers as current Gitaly does (auth/token.go, internal/gitaly/config/locator.go,
internal/gitaly/repoutil/remove.go): with a token configured, no or malformed
`authorization: Bearer` header -> UNAUTHENTICATED "authentication required"; a v2
token with a wrong HMAC or a timestamp more than 30 s from the server's clock ->
PERMISSION_DENIED "permission denied". Then: no repository -> INVALID_ARGUMENT
"repository not set"; empty relative path -> INVALID_ARGUMENT "repository path not
set"; empty storage -> INVALID_ARGUMENT "storage name not set"; unknown storage ->
INVALID_ARGUMENT "storage name not found"; a path escaping the storage root ->
INVALID_ARGUMENT "relative path escapes root directory"; a missing repository ->
NOT_FOUND "repository does not exist"; else the directory is moved aside and
deleted -> OK.
"""

import hashlib
import hmac
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from grpc_tools import protoc

DEFAULT_PROTO_DIR = "/usr/share/gocode/src/gitlab.com/gitlab-org/gitaly-proto"
TOKEN_VALIDITY_SECONDS = 30


def generate_messages():
    """Generate the Python messages of Gitaly's protos; returns the module."""
    proto_dir = os.environ.get("HK_GITALY_PROTO_DIR") or DEFAULT_PROTO_DIR
    wanted = ["shared.proto", "repository-service.proto"]
    for name in wanted:
        if not os.path.exists(os.path.join(proto_dir, name)):
            sys.exit(
                f"gitaly_stub: {name} not in {proto_dir}: install Debian's "
                "golang-gitaly-proto-dev (scripts/system-packages.sh)"
            )
    out = tempfile.mkdtemp(prefix="hk-gitaly-proto-")
    includes = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(
        ["grpc_tools.protoc", f"-I{proto_dir}", f"-I{includes}", f"--python_out={out}"]
        + wanted
    )
    if rc != 0:
        sys.exit(f"gitaly_stub: grpc_tools.protoc failed ({rc})")
    sys.path.insert(0, out)
    import repository_service_pb2  # noqa: E402 (generated just now)

    return repository_service_pb2, out


class Calls:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()

    def write(self, call):
        with self.lock:
            self.file.write(json.dumps(call) + "\n")
            self.file.flush()


def token_check(secret, metadata):
    """None when authorized, else (code, message) as Gitaly's auth/token.go answers."""
    header = dict(metadata).get("authorization")
    unauthenticated = (grpc.StatusCode.UNAUTHENTICATED, "authentication required")
    if header is None:
        return unauthenticated
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return unauthenticated
    parts = token.split(".", 2)
    if len(parts) != 3:
        return unauthenticated
    version, sig, message = parts
    try:
        signed = bytes.fromhex(sig)
    except ValueError:
        return unauthenticated
    denied = (grpc.StatusCode.PERMISSION_DENIED, "permission denied")
    if version != "v2":
        return denied
    expected = hmac.new(secret.encode(), message.encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(signed, expected):
        return denied
    try:
        issued = int(message)
    except ValueError:
        return denied
    if abs(issued - time.time()) > TOKEN_VALIDITY_SECONDS:
        return denied
    return None


class Service:
    def __init__(self, directory, config, calls):
        self.root = os.path.join(directory, "storages")
        self.storages = set(config["storages"])
        self.token = config.get("token")
        self.calls = calls

    def remove_repository(self, request, context):
        repo = request.repository if request.HasField("repository") else None
        call = {
            "storage": repo.storage_name if repo else None,
            "relative_path": repo.relative_path if repo else None,
            "gl_repository": repo.gl_repository if repo else None,
            "authorized": None,
        }
        answer = None
        if self.token:
            refused = token_check(self.token, context.invocation_metadata())
            call["authorized"] = refused is None
            answer = refused
        if answer is None:
            answer = self.remove(repo)
        code, message = answer if answer else (grpc.StatusCode.OK, "")
        call["code"] = code.name
        call["message"] = message
        self.calls.write(call)
        if answer:
            context.abort(code, message)
        return None

    def remove(self, repo):
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        if repo is None or (not repo.storage_name and not repo.relative_path):
            return (invalid, "repository not set")
        if not repo.relative_path:
            return (invalid, "repository path not set")
        if not repo.storage_name:
            return (invalid, "storage name not set")
        if repo.storage_name not in self.storages:
            return (invalid, "storage name not found")
        storage_root = os.path.realpath(os.path.join(self.root, repo.storage_name))
        path = os.path.realpath(os.path.join(storage_root, repo.relative_path))
        if not path.startswith(storage_root + os.sep):
            return (invalid, "relative path escapes root directory")
        if not os.path.isdir(path):
            return (grpc.StatusCode.NOT_FOUND, "repository does not exist")
        staging = os.path.join(storage_root, "+gitaly", "tmp")
        os.makedirs(staging, exist_ok=True)
        aside = tempfile.mkdtemp(dir=staging)
        os.rename(path, os.path.join(aside, os.path.basename(path) + "+removed"))
        shutil.rmtree(aside)
        return None


def main():
    directory = sys.argv[1]
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    for name in config["storages"]:
        os.makedirs(os.path.join(directory, "storages", name), exist_ok=True)
    messages, generated = generate_messages()
    service = Service(directory, config, Calls(os.path.join(directory, "calls.jsonl")))
    handler = grpc.method_handlers_generic_handler(
        "gitaly.RepositoryService",
        {
            "RemoveRepository": grpc.unary_unary_rpc_method_handler(
                service.remove_repository,
                request_deserializer=messages.RepositoryExistsRequest.FromString,
                response_serializer=lambda _: b"",
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    tmp = os.path.join(directory, "port.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(port))
    os.replace(tmp, os.path.join(directory, "port"))
    # The generated modules are loaded; their directory is not needed any more.
    shutil.rmtree(generated, ignore_errors=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
