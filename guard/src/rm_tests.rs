use super::*;

#[test]
fn root_system_and_home_targets_are_protected() {
    for root in [
        "/",
        "//",
        "/*",
        "/.",
        "/..",
        "/../..",
        "/./*",
        "/tmp/../..",
        "/.*",
        "/{,}",
    ] {
        assert_eq!(protected_target(root), Some(ROOT_FILESYSTEM), "{root}");
    }
    for system in [
        "/etc",
        "/etc/",
        "/usr/*",
        "/home",
        "/root",
        "/var",
        "/lib64",
        "/tmp/../etc",
        "/{etc,tmp}",
        "/Users",
        "/System",
    ] {
        assert_eq!(protected_target(system), Some(SYSTEM_DIRECTORY), "{system}");
    }
    for home in [
        "~",
        "~/",
        "~/*",
        "$HOME",
        "${HOME}",
        "$HOME/",
        "${HOME}/*",
        "~/.",
        "~/..",
    ] {
        assert_eq!(protected_target(home), Some(HOME_DIRECTORY), "{home}");
    }
    for ordinary in [
        "/tmp",
        "/etc/nginx",
        "/home/user",
        "~/projects",
        "build",
        "*",
        ".",
        "/...",
        "/.ssh",
        "$HOMEDIR",
        "~user",
    ] {
        assert_eq!(protected_target(ordinary), None, "{ordinary}");
    }
}

fn classify(args: &str) -> Option<&'static str> {
    scan_text(&format!("rm {args}"))
}

#[test]
fn rm_arguments_are_classified_like_gnu_rm_reads_them() {
    assert_eq!(classify("-rf /tmp/x"), Some(ROOT_PATH));
    assert_eq!(classify("/tmp/x -r"), Some(ROOT_PATH));
    assert_eq!(classify("-f /etc/passwd"), Some(ROOT_PATH));
    assert_eq!(classify("/"), Some(ROOT_PATH));
    assert_eq!(classify("-rf build"), Some(RECURSIVE));
    assert_eq!(classify("build -R"), Some(RECURSIVE));
    assert_eq!(classify("--recursive build"), Some(RECURSIVE_LONG));
    assert_eq!(classify("--r build"), Some(RECURSIVE_LONG));
    assert_eq!(classify("-f /tmp/x.log"), None);
    assert_eq!(classify("--force build"), None);
    assert_eq!(classify("-- -r"), None);
    assert_eq!(classify("-f /home/me/notes.txt"), None);
}

#[test]
fn text_scan_finds_the_most_severe_rm() {
    assert_eq!(scan_text("rm -r a; rm -rf /tmp"), Some(ROOT_PATH));
    assert_eq!(scan_text("rm --recursive a; rm -r b"), Some(RECURSIVE));
    assert_eq!(scan_text("git rm -r dir"), Some(RECURSIVE));
    assert_eq!(scan_text("echo 'rm -rf \"/\"'"), Some(ROOT_PATH));
    assert_eq!(scan_text("docker run --rm -v /etc:/etc x"), None);
    assert_eq!(scan_text("rm -f a && ls -r /"), None);
    assert_eq!(scan_text("firmware -r /"), None);
}
