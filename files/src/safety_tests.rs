use super::*;

const ANCHORS: SafetyAnchors<'static> = SafetyAnchors {
    home: Some("/home/u"),
    caduceus_home: Some("/home/u/.caduceus"),
};

#[test]
fn devices_and_proc_leaks_are_blocked() {
    for path in [
        "/dev/zero",
        "/dev/urandom",
        "/dev/fd/0",
        "/proc/self/environ",
        "/proc/12/fd/2",
    ] {
        assert!(is_blocked_device(&[path]), "{path}");
    }
    assert!(!is_blocked_device(&[
        "/dev/null",
        "/proc/cpuinfo",
        "/home/u/dev/zero"
    ]));
    assert_eq!(
        device_error("/dev/zero"),
        "Cannot read '/dev/zero': this is a device file that would block or produce infinite output."
    );
}

#[test]
fn binary_extensions() {
    assert_eq!(binary_extension("/x/logo.PNG").as_deref(), Some(".png"));
    assert_eq!(binary_extension("/x/app.pdf"), None);
    assert_eq!(binary_extension("/x.d/README"), None);
    assert_eq!(
        binary_extension_error("logo.png", ".png"),
        "Cannot read binary file 'logo.png' (.png). Use terminal to inspect binary files."
    );
}

#[test]
fn secret_reads_are_refused() {
    let env = read_block_error("/p/.env.local", &["/p/.env.local"], ANCHORS).unwrap();
    assert!(env.starts_with("Access denied: /p/.env.local is a secret-bearing environment file"));
    assert!(read_block_error("/p/.env.example", &["/p/.env.example"], ANCHORS).is_none());
    assert!(read_block_error("/p/.envrc", &["/p/.envrc"], ANCHORS).is_some());

    let auth = read_block_error(
        "/home/u/.caduceus/auth.json",
        &["/home/u/.caduceus/auth.json"],
        ANCHORS,
    )
    .unwrap();
    assert!(auth.contains("is a caduceus credential store"));
    let token = "/home/u/.caduceus/mcp-tokens/github.json";
    assert!(
        read_block_error(token, &[token], ANCHORS)
            .unwrap()
            .contains("MCP token file")
    );
    let hub = "/home/u/.caduceus/skills/.hub/index-cache/x.json";
    assert!(
        read_block_error(hub, &[hub], ANCHORS)
            .unwrap()
            .contains("internal caduceus cache file")
    );
    // A symlink-resolved form is enough to trigger.
    assert!(
        read_block_error(
            "/p/link",
            &["/p/link", "/home/u/.caduceus/auth.json"],
            ANCHORS
        )
        .is_some()
    );
    assert!(read_block_error("/p/main.rs", &["/p/main.rs"], ANCHORS).is_none());
}

#[test]
fn sensitive_system_paths_and_config() {
    let error = sensitive_write_error("/etc/hosts", &["/etc/hosts"], ANCHORS).unwrap();
    assert_eq!(
        error,
        "Refusing to write to sensitive system path: /etc/hosts\nUse the terminal tool with sudo if you need to modify system files."
    );
    assert!(sensitive_write_error("s", &["/var/run/docker.sock"], ANCHORS).is_some());
    assert!(sensitive_write_error("b", &["/boot/grub/grub.cfg"], ANCHORS).is_some());
    let config = sensitive_write_error(
        "~/.caduceus/config.yaml",
        &["/home/u/.caduceus/config.yaml"],
        ANCHORS,
    )
    .unwrap();
    assert!(
        config.starts_with("Refusing to write to caduceus config file: ~/.caduceus/config.yaml\n")
    );
    assert!(sensitive_write_error("/tmp/x", &["/tmp/x"], ANCHORS).is_none());
}

#[test]
fn credential_writes_and_safe_root() {
    for path in [
        "/home/u/.ssh/authorized_keys",
        "/home/u/.ssh/known_hosts",
        "/home/u/.aws/credentials",
        "/home/u/.config/gh/hosts.yml",
        "/home/u/.netrc",
        "/home/u/.caduceus/.env",
        "/home/u/.caduceus/sessions/1.json",
        "/etc/sudoers.d/x",
    ] {
        let error = write_denied_error(path, &[path], ANCHORS, &[], "Write").unwrap();
        assert_eq!(
            error,
            format!("Write denied: '{path}' is a protected system/credential file.")
        );
    }
    assert!(
        write_denied_error("/home/u/.sshx", &["/home/u/.sshx"], ANCHORS, &[], "Write").is_none()
    );

    let roots = vec!["/work".to_owned()];
    assert!(
        write_denied_error("/work/a.txt", &["/work/a.txt"], ANCHORS, &roots, "Write").is_none()
    );
    let outside =
        write_denied_error("/tmp/a.txt", &["/tmp/a.txt"], ANCHORS, &roots, "Write").unwrap();
    assert_eq!(
        outside,
        "Write denied: '/tmp/a.txt' is outside the write safe root (/work). Unset CADUCEUS_WRITE_SAFE_ROOT or add this path's directory prefix."
    );
    // A symlink inside the root that points outside is outside.
    assert!(
        write_denied_error(
            "/work/l",
            &["/work/l", "/tmp/real"],
            ANCHORS,
            &roots,
            "Delete"
        )
        .is_some()
    );
}
