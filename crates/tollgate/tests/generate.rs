//! `tollgate completions SHELL` and `tollgate man` are generated from the command line itself: every subcommand and flag is in them.

use tollgate_testkit::tollgate::tollgate;

fn stdout(args: &[&str]) -> String {
    let output = tollgate(args).output().expect("tollgate runs");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn completions_know_every_subcommand_and_serves_flags() {
    let bash = stdout(&["completions", "bash"]);
    assert!(bash.contains("_tollgate()"), "{bash}");
    assert!(bash.contains("complete -F _tollgate"), "{bash}");
    for word in [
        "serve",
        "proxy",
        "validate",
        "completions",
        "man",
        "--drain-delay",
    ] {
        assert!(bash.contains(word), "bash completions lack {word}");
    }
    let zsh = stdout(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef tollgate"), "{zsh}");
    assert!(zsh.contains("--drain-delay"));
    let fish = stdout(&["completions", "fish"]);
    assert!(fish.contains("complete -c tollgate"), "{fish}");

    let output = tollgate(&["completions", "tcsh"]).output().expect("runs");
    assert_eq!(
        output.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn the_man_page_covers_the_command_and_each_subcommand() {
    let page = stdout(&["man"]);
    assert!(page.contains(".TH tollgate 1"), "{page}");
    assert!(page.contains(".SH SUBCOMMANDS"), "{page}");
    assert!(page.contains("tollgate\\-serve"), "{page}");

    let serve = stdout(&["man", "serve"]);
    assert!(serve.contains(".TH tollgate-serve 1"), "{serve}");
    assert!(serve.contains("\\-\\-drain\\-delay"), "{serve}");
    assert!(serve.contains("TOLLGATE_DRAIN_DELAY"), "{serve}");

    let output = tollgate(&["man", "nope"]).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no subcommand \"nope\""), "{stderr}");
}
