"""The SMTP sink of the delivery tests: aiosmtpd on 127.0.0.1, run by tests/sinks/smtp.rs.

Usage: smtp_sink.py DIR starttls|implicit|plain [PORT]

PORT (default 0: any free port) lets a test open a port it kept closed until then.

DIR holds what the Rust side gives it and reads back:
  cert.pem, key.pem  the leaf certificate (of the test CA) and its key (given);
  rules.json         [[needle, code], ...]: a RCPT TO path containing needle gets the
                     reply code (given; replaced atomically, read at every RCPT);
  auth.json          ["username", "password"]: when present, AUTH succeeds only with
                     these (535 otherwise; given, replaced atomically, read at every AUTH);
  events.jsonl       one JSON object a line, appended and flushed before the reply:
                     {"connect": true} per TCP connection, {"auth_failed": true} per
                     refused AUTH, and per accepted message
                     {"mail_from", "rcpt_to", "data", "tls", "auth"};
  port               the port it listens on, written (atomically) once it listens;
  hold               while it exists the sink does not listen yet (given; the test
                     removes it to open the port at a moment of its choosing).

STARTTLS mode: plain greeting, STARTTLS advertised, AUTH only after it. Implicit mode:
TLS from the first byte, AUTH at once. Plain mode: no TLS at all (STARTTLS not
advertised), AUTH accepted in plain text, as an internal relay may. Any credentials
are accepted and recorded, unless auth.json names the only ones accepted.
"""

import asyncio
import json
import os
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

HOSTNAME = "sink.test"


class Events:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")

    def write(self, event):
        self.file.write(json.dumps(event) + "\n")
        self.file.flush()


class Handler:
    def __init__(self, directory, events):
        self.rules_path = os.path.join(directory, "rules.json")
        self.events = events

    def rules(self):
        try:
            with open(self.rules_path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return []

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        for needle, code in self.rules():
            if needle in address:
                return f"{code} rejected <{address}>"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 ok"

    async def handle_DATA(self, server, session, envelope):
        auth = session.auth_data
        if isinstance(auth, LoginPassword):
            auth = [auth.login.decode("utf-8", "replace"), auth.password.decode("utf-8", "replace")]
        else:
            auth = None
        self.events.write(
            {
                "mail_from": envelope.mail_from,
                "rcpt_to": list(envelope.rcpt_tos),
                # Dot-unstuffed, CRLF line ends as transferred.
                "data": envelope.original_content.decode("utf-8", "replace"),
                "tls": server.transport.get_extra_info("ssl_object") is not None,
                "auth": auth,
            }
        )
        return "250 2.0.0 queued"


class Authenticator:
    def __init__(self, directory, events):
        self.path = os.path.join(directory, "auth.json")
        self.events = events

    def __call__(self, server, session, envelope, mechanism, auth_data):
        try:
            with open(self.path, encoding="utf-8") as f:
                user, password = json.load(f)
        except FileNotFoundError:
            return AuthResult(success=True, auth_data=auth_data)
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode("utf-8", "replace") == user
            and auth_data.password.decode("utf-8", "replace") == password
        )
        if not ok:
            self.events.write({"auth_failed": True})
            # aiosmtpd replies 535 5.7.8 to a failed AUTH.
            return AuthResult(success=False, handled=False)
        return AuthResult(success=True, auth_data=auth_data)


class CountingSMTP(SMTP):
    """Records each TCP connection (not the second connection_made of STARTTLS)."""

    def __init__(self, *args, events, **kwargs):
        super().__init__(*args, **kwargs)
        self.events = events

    def connection_made(self, transport):
        if self._original_transport is None:
            self.events.write({"connect": True})
        super().connection_made(transport)


async def main(directory, mode, port):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem"))
    events = Events(os.path.join(directory, "events.jsonl"))
    handler = Handler(directory, events)
    implicit = mode == "implicit"
    plain = mode == "plain"

    def factory():
        return CountingSMTP(
            handler,
            events=events,
            hostname=HOSTNAME,
            tls_context=None if implicit or plain else ctx,
            # aiosmtpd only counts STARTTLS as TLS for AUTH; implicit TLS is TLS from
            # the first byte, so AUTH is safe there without it. A plain relay takes
            # AUTH in plain text.
            auth_require_tls=not (implicit or plain),
            authenticator=Authenticator(directory, events),
        )

    hold = os.path.join(directory, "hold")
    while os.path.exists(hold):
        await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, "127.0.0.1", port, ssl=ctx if implicit else None)
    port = server.sockets[0].getsockname()[1]
    tmp = os.path.join(directory, "port.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(port))
    os.replace(tmp, os.path.join(directory, "port"))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[2] not in ("starttls", "implicit", "plain"):
        sys.exit("usage: smtp_sink.py DIR starttls|implicit|plain [PORT]")
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else 0))
