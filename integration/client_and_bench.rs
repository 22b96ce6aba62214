//! The real `ratelimit_client` and `ratelimit-bench` binaries against the
//! bench's no-op server on a free loopback port. Nothing here asserts speed.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use crate::support::bench_binary;

const CLIENT: &str = env!("CARGO_BIN_EXE_ratelimit_client");

/// A child process killed when the test ends, passed or not.
struct Guard {
    child: Child,
    // Kept open so the child never writes into a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `ratelimit-bench noop` on 127.0.0.1:0; returns it and its address.
fn start_noop() -> (Guard, String) {
    start_noop_with(&[])
}

/// `start_noop` with extra flags.
fn start_noop_with(extra: &[&str]) -> (Guard, String) {
    let mut child = Command::new(bench_binary())
        .args(["noop", "--listen", "127.0.0.1:0", "--duration", "120s"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start ratelimit-bench noop");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut reader = BufReader::new(stdout);
    let mut guard_line = String::new();
    let read = reader.read_line(&mut guard_line);
    let guard = Guard {
        child,
        _stdout: reader,
    };
    read.expect("read the noop's first line");
    let addr = guard_line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {guard_line:?}"))
        .to_string();
    (guard, addr)
}

fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
    let program = program.as_ref();
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.to_string_lossy()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The last line of standard output that holds a JSON object.
fn json_line(output: &Output) -> serde_json::Value {
    let stdout = text(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {stdout:?}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON {line:?}: {e}"))
}

#[test]
fn client_prints_flags_and_response_like_the_original() {
    let (_noop, addr) = start_noop();
    let out = run(
        CLIENT,
        &[
            "-dial_string",
            &addr,
            "-domain",
            "d",
            "-descriptors",
            "a=b,c=d",
            "-descriptors",
            "e=f",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let expected = format!(
        "Flag: --descriptors=\"[ <key=a, value=b>  <key=c, value=d> ] [ <key=e, value=f> ] \"\n\
         Flag: --dial_string=\"{addr}\"\n\
         Flag: --domain=\"d\"\n\
         Flag: --grpc-cert-file=\"\"\n\
         Flag: --grpc-key-file=\"\"\n\
         Flag: --grpc-server-ca-file=\"\"\n\
         Flag: --grpc-use-tls=\"false\"\n\
         Flag: --oltp-protocol=\"\"\n\
         response: overall_code:OK statuses:{{code:OK}} statuses:{{code:OK}}\n"
    );
    assert_eq!(text(&out.stdout), expected);
}

#[test]
fn client_against_a_closed_port_fails_with_request_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let dial = format!("127.0.0.1:{port}");
    let out = run(
        CLIENT,
        &["-dial_string", &dial, "-domain", "d", "-descriptors", "a=b"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!(
            "request error: rpc error: code = Unavailable desc = connection error: \
             desc = \"transport: Error while dialing: dial tcp {dial}: connect: \
             connection refused\""
        ),
        "{stdout}"
    );
}

#[test]
fn client_rejects_a_malformed_descriptor_like_go_flag() {
    let out = run(CLIENT, &["-descriptors", "a=b=c"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "invalid value \"a=b=c\" for flag -descriptors: invalid descriptor list\n"
        ),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn client_with_tls_reports_an_unreadable_ca_file() {
    let out = run(
        CLIENT,
        &[
            "-dial_string",
            "127.0.0.1:1",
            "-grpc-use-tls",
            "-grpc-server-ca-file",
            "/nonexistent/ca.pem",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("Flag: --grpc-use-tls=\"true\"\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("error connecting: failed to read file: /nonexistent/ca.pem"),
        "{stdout}"
    );
}

#[test]
fn bench_run_against_noop_has_no_errors() {
    let (_noop, addr) = start_noop();
    let out = run(
        bench_binary(),
        &[
            "run",
            "--target",
            &addr,
            "--connections",
            "2",
            "--concurrency",
            "4",
            "--duration",
            "1s",
            "--warmup",
            "100ms",
            "--descriptors",
            "2",
            "--keys",
            "zipf:100:1.1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let json = json_line(&out);
    assert_eq!(json["mode"], "run");
    assert_eq!(json["errors"], 0, "{json}");
    let requests = json["requests"].as_u64().expect("requests");
    assert!(requests > 0, "{json}");
    assert_eq!(json["ok"].as_u64(), Some(requests), "{json}");
    assert!(json["p50_us"].as_u64().is_some() && json["p999_us"].as_u64().is_some());
}

#[test]
fn bench_open_loop_and_compare_against_noop() {
    let (_noop, addr) = start_noop();
    let out = run(
        bench_binary(),
        &[
            "compare",
            "--target",
            &addr,
            "--duration",
            "300ms",
            "--warmup",
            "0s",
            "--rounds",
            "2",
            "--rps",
            "200",
            "--keys",
            "uniform:10",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let json = json_line(&out);
    assert_eq!(json["mode"], "compare");
    assert_eq!(json["rounds"], 2);
    for side in ["noop", "target"] {
        assert_eq!(json[side]["errors"], 0, "{json}");
        assert!(json[side]["requests"].as_u64().unwrap_or(0) > 0, "{json}");
    }
    assert!(json["rps_ratio"].as_f64().is_some(), "{json}");
}

#[test]
fn bench_rejects_bad_command_lines() {
    for args in [
        &["run", "--keys", "zipf:10"][..],
        &["run", "--duration", "2h"],
        &["run", "--nope", "1"],
        &["fly"],
    ] {
        let out = run(bench_binary(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = run(bench_binary(), &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("ratelimit-bench run"));
}

// A throw-away test PKI (P-256, valid until 2126): a CA, a server
// certificate for localhost / 127.0.0.1 and a client certificate issued by
// it, and an unrelated CA.
const CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBoDCCAUWgAwIBAgIUS7mzbKwT/5jOcGzLuliPy7BvZ9QwCgYIKoZIzj0EAwIw\n\
HDEaMBgGA1UEAwwRcmF0ZWxpbWl0LXRlc3QtY2EwIBcNMjYxMTMwMjIxMTMyWhgP\n\
MjEyNjExMDYyMjExMzJaMBwxGjAYBgNVBAMMEXJhdGVsaW1pdC10ZXN0LWNhMFkw\n\
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAErFphCsX/Q8LpC3RlEE0LfWxX7BzFRjl8\n\
mqmmxZE3EfU12D3sS0q7UfQCK6PQJY46uzJmZcSEwssdDoqnljd09KNjMGEwHQYD\n\
VR0OBBYEFMIYnuqP4fryvzXrHdz6Q0ZSfXU0MB8GA1UdIwQYMBaAFMIYnuqP4fry\n\
vzXrHdz6Q0ZSfXU0MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoG\n\
CCqGSM49BAMCA0kAMEYCIQDuBCXraQDy0uJmfmdOZp7CaXnpOcokzpyPT3m3NeYW\n\
CgIhAOBh5ndCfqOgUeaTwahm7cz7xmE5wDRhOsbtaVlfekf9\n\
-----END CERTIFICATE-----\n\
";

const OTHER_CA_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBjDCCATOgAwIBAgIUdpf+tx2cCl0jwJfMZpfXExs3PqowCgYIKoZIzj0EAwIw\n\
EzERMA8GA1UEAwwIb3RoZXItY2EwIBcNMjYxMTMwMjIxMTMyWhgPMjEyNjExMDYy\n\
MjExMzJaMBMxETAPBgNVBAMMCG90aGVyLWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0D\n\
AQcDQgAEjDOvaj8sM8/p/ZT9Vaz/GYUSZR3v9Vp84bu87/eS+Vb3PfaNL1jJe/Kl\n\
dYImqj7momwnGvzWo557daaPwD3BgKNjMGEwHQYDVR0OBBYEFDB3676iVK/cyMg1\n\
iwGwgTYbnAREMB8GA1UdIwQYMBaAFDB3676iVK/cyMg1iwGwgTYbnAREMA8GA1Ud\n\
EwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMCA0cAMEQCIBMI\n\
hDrXxySLNUIeszcmM2JJrY1s3i0T/h8g0kPXOK5LAiAhR+MPlDTH5G8kKVP89pc2\n\
so3IA3eBZi/mnOFaVcOmFA==\n\
-----END CERTIFICATE-----\n\
";

const SERVER_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBsjCCAVigAwIBAgIUZGfeYMH4aSb0Xi7Iw16jglnMJ8wwCgYIKoZIzj0EAwIw\n\
HDEaMBgGA1UEAwwRcmF0ZWxpbWl0LXRlc3QtY2EwIBcNMjYxMTMwMjIxMTMyWhgP\n\
MjEyNjExMDYyMjExMzJaMBQxEjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49\n\
AgEGCCqGSM49AwEHA0IABIbkZDivhqm8a5arJWsdmVC6MJvAsQxwVVOHl4xlts4L\n\
m/Hq2l6sKQxk4XqoUDniEHWijyO9M9c1sG+S862C+yejfjB8MBoGA1UdEQQTMBGC\n\
CWxvY2FsaG9zdIcEfwAAATATBgNVHSUEDDAKBggrBgEFBQcDATAJBgNVHRMEAjAA\n\
MB0GA1UdDgQWBBTchY4EwyyqZXISsxv7srgnQHJ2ODAfBgNVHSMEGDAWgBTCGJ7q\n\
j+H68r816x3c+kNGUn11NDAKBggqhkjOPQQDAgNIADBFAiEAzWyeW280Mng8KIRN\n\
kbO7EGjcZM74Bm+nRcILA3e7GT0CIHadszHb/3bJqaCs9gnYlUu6mmovZLBwjJkw\n\
em9/JOgI\n\
-----END CERTIFICATE-----\n\
";

const SERVER_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgvwIPWpKRtSsB9oEu\n\
z7hcnm/scwZfoJNmVTi3y+wf9cmhRANCAASG5GQ4r4apvGuWqyVrHZlQujCbwLEM\n\
cFVTh5eMZbbOC5vx6tperCkMZOF6qFA54hB1oo8jvTPXNbBvkvOtgvsn\n\
-----END PRIVATE KEY-----\n\
";

const CLIENT_PEM: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBlDCCATmgAwIBAgIUZGfeYMH4aSb0Xi7Iw16jglnMJ80wCgYIKoZIzj0EAwIw\n\
HDEaMBgGA1UEAwwRcmF0ZWxpbWl0LXRlc3QtY2EwIBcNMjYxMTMwMjIxMTMyWhgP\n\
MjEyNjExMDYyMjExMzJaMBExDzANBgNVBAMMBmNsaWVudDBZMBMGByqGSM49AgEG\n\
CCqGSM49AwEHA0IABJNCdUjHp7bGHPGtoXeNNviN0OMqrpdG/CCthL/bSzgzzEg6\n\
gN0ycesPJOJqbbgdOjNPJ485M4l0YCVHigSJtRCjYjBgMBMGA1UdJQQMMAoGCCsG\n\
AQUFBwMCMAkGA1UdEwQCMAAwHQYDVR0OBBYEFLL86ClbmzhSm7x+kPvm35kDUzIE\n\
MB8GA1UdIwQYMBaAFMIYnuqP4fryvzXrHdz6Q0ZSfXU0MAoGCCqGSM49BAMCA0kA\n\
MEYCIQD4sDLZSjCMWsPxOqQg4eFE3utXZSssMlczThRwo83ugwIhAMIjgidSFXND\n\
tuk1SiNjsTCSJOuXSCPPL3p916f3BodR\n\
-----END CERTIFICATE-----\n\
";

const CLIENT_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgJ88/jS7cKIuTwM9e\n\
derElI/Kc8UHPpEQdnI/e5F5f8uhRANCAASTQnVIx6e2xhzxraF3jTb4jdDjKq6X\n\
RvwgrYS/20s4M8xIOoDdMnHrDyTiam24HTozTyePOTOJdGAlR4oEibUQ\n\
-----END PRIVATE KEY-----\n\
";

/// Writes the test PKI into a temporary directory.
fn pki() -> (tempfile::TempDir, impl Fn(&str) -> String) {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, pem) in [
        ("ca.pem", CA_PEM),
        ("other.pem", OTHER_CA_PEM),
        ("srv.pem", SERVER_PEM),
        ("srv.key", SERVER_KEY),
        ("cli.pem", CLIENT_PEM),
        ("cli.key", CLIENT_KEY),
    ] {
        std::fs::write(dir.path().join(name), pem).expect("write PEM");
    }
    let root = dir.path().to_path_buf();
    let path = move |name: &str| root.join(name).to_string_lossy().into_owned();
    (dir, path)
}

#[test]
fn client_over_tls_and_mtls() {
    let (_dir, path) = pki();
    let (srv, key, ca) = (path("srv.pem"), path("srv.key"), path("ca.pem"));
    let (_tls, tls_addr) = start_noop_with(&["--tls-cert", &srv, "--tls-key", &key]);
    let (_mtls, mtls_addr) = start_noop_with(&[
        "--tls-cert",
        &srv,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ]);
    let port = tls_addr.rsplit_once(':').map(|(_, p)| p).expect("port");
    let localhost = format!("localhost:{port}");
    let ok = "response: overall_code:OK statuses:{code:OK}";
    let last_line = |out: &Output| {
        text(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    };

    for dial in [tls_addr.as_str(), localhost.as_str()] {
        let out = run(
            CLIENT,
            &[
                "-dial_string",
                dial,
                "-grpc-use-tls",
                "-grpc-server-ca-file",
                &ca,
                "-domain",
                "d",
                "-descriptors",
                "a=b",
            ],
        );
        assert_eq!(last_line(&out), ok, "{dial}");
        assert_eq!(out.status.code(), Some(0));
    }

    let other = path("other.pem");
    let out = run(
        CLIENT,
        &[
            "-dial_string",
            &tls_addr,
            "-grpc-use-tls",
            "-grpc-server-ca-file",
            &other,
            "-domain",
            "d",
            "-descriptors",
            "a=b",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        last_line(&out).starts_with(
            "request error: rpc error: code = Unavailable desc = connection error: \
             desc = \"transport: authentication handshake failed: "
        ),
        "{}",
        last_line(&out)
    );

    let (cli, cli_key) = (path("cli.pem"), path("cli.key"));
    let out = run(
        CLIENT,
        &[
            "-dial_string",
            &mtls_addr,
            "-grpc-use-tls",
            "-grpc-server-ca-file",
            &ca,
            "-grpc-cert-file",
            &cli,
            "-grpc-key-file",
            &cli_key,
            "-domain",
            "d",
            "-descriptors",
            "a=b",
        ],
    );
    assert_eq!(last_line(&out), ok);
    let out = run(
        CLIENT,
        &[
            "-dial_string",
            &mtls_addr,
            "-grpc-use-tls",
            "-grpc-server-ca-file",
            &ca,
            "-domain",
            "d",
            "-descriptors",
            "a=b",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "mTLS without a client certificate"
    );
    assert!(
        last_line(&out).starts_with("request error: "),
        "{}",
        last_line(&out)
    );
}
