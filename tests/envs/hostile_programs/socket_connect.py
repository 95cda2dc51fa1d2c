# Opens sockets: TCP connect to a port the test listens on, UDP to the same port, DNS lookup.
# Expected: the test's listener never sees a connection or a datagram.
import sys

try:
    import socket
except Exception as e:  # guard mode refuses the import itself
    sys.stderr.write(f"ATTEMPT import socket: {type(e).__name__}\n")
    raise SystemExit(1) from None
port = int("__PORT__")
try:
    s = socket.create_connection(("127.0.0.1", port), timeout=1)
    s.sendall(b"__MARKER__")
    sys.stderr.write("ATTEMPT tcp connect: CONNECTED\n")
except OSError as e:
    sys.stderr.write(f"ATTEMPT tcp connect: {type(e).__name__} errno={e.errno}\n")
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"__MARKER__", ("127.0.0.1", port))
    sys.stderr.write("ATTEMPT udp sendto: SENT\n")
except OSError as e:
    sys.stderr.write(f"ATTEMPT udp sendto: {type(e).__name__} errno={e.errno}\n")
try:
    socket.getaddrinfo("example.com", 80)
    sys.stderr.write("ATTEMPT dns: RESOLVED\n")
except OSError as e:
    sys.stderr.write(f"ATTEMPT dns: {type(e).__name__}\n")
