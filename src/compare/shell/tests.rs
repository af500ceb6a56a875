//! Tests of the shell lexer, normal form and effect analysis.

use super::*;

#[test]
fn the_command_of_a_shell_tool() {
    assert_eq!(
        command_of(r#"{"command": "ls -F"}"#).as_deref(),
        Some("ls -F")
    );
    assert_eq!(
        command_of(r#"{"cmd": ["bash", "-lc", "ls"]}"#).as_deref(),
        Some("bash -lc ls")
    );
    assert_eq!(command_of("ls -la").as_deref(), Some("ls -la"));
    assert_eq!(command_of(r#"{"path": "a"}"#), None);
}

#[test]
fn lexing_quotes_operators_and_redirections() {
    let words = |c: &str| words(c);
    assert_eq!(
        words(r#"grep -n "a b" 'c d' e\ f"#),
        ["grep", "-n", "a b", "c d", "e f"]
    );
    let cmds = simple_commands("cd /repo && python t.py 2>&1 | tee log.txt > /dev/null");
    assert_eq!(cmds.len(), 3);
    assert_eq!(cmds[0].0, ["cd", "/repo"]);
    assert_eq!(cmds[1].0, ["python", "t.py"]);
    assert!(cmds[1].1.is_empty(), "2>&1 is a duplication");
    assert_eq!(
        cmds[2],
        (
            vec!["tee".into(), "log.txt".into()],
            vec!["/dev/null".into()]
        )
    );
    assert_eq!(words("echo a # comment\nls"), ["echo", "a", "ls"]);
    // a here-document body is no command
    let cmds = simple_commands("cat <<'EOF' > t.py\nrm -rf /\nEOF\nls");
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    assert_eq!(cmds[0].1, ["t.py"]);
    assert_eq!(cmds[1].0, ["ls"]);
}

#[test]
fn quotes_balance_or_not() {
    assert!(quotes_balance(r#"grep "a b" 'c' d\'s"#));
    assert!(!quotes_balance("Let's try again"));
    assert!(!quotes_balance(r#"echo "open"#));
}

#[test]
fn normal_forms_ignore_spacing_quoting_and_a_leading_cd() {
    assert_eq!(normalise("ls   -la\t'src'"), normalise("ls -la src"));
    assert_eq!(normalise("cd /repo && pytest -x"), normalise("pytest  -x"));
    assert_ne!(normalise("pytest -x"), normalise("pytest -q"));
    assert_eq!(normalise("grep 'a b' f"), "grep 'a b' f");
}

#[test]
fn writes_are_recognised() {
    use CommandEffect::*;
    for command in [
        "sed -i 's/a/b/' f.py",
        "cat <<'EOF' > test.py\nprint(1)\nEOF",
        "echo x >> notes.txt",
        "git apply fix.patch",
        "git -C repo checkout main",
        "rm -rf build",
        "cd /testbed && sed -i.bak 's/x/y/' a.py && python t.py",
        "python -c \"open('x.py', 'w').write('1')\"",
        "python - <<EOF\nfrom pathlib import Path\nPath('a').write_text('b')\nEOF",
        "pip install -e .",
        "python -m pip install requests",
        "tar -xzf a.tgz",
        "echo hi | tee out.log",
        "edit 1:1",
        "export A=1",
    ] {
        assert_eq!(classify(command), Writes, "{command}");
    }
    for command in [
        "ls -F",
        "cat a.py",
        "grep -rn foo src 2>/dev/null",
        "python reproduce.py",
        "cd /testbed && python -m pytest tests/ -x 2>&1 | tail -20",
        "find / -name java 2>/dev/null",
        "git diff",
        "git status",
        "sed -n '1,20p' f.py",
        "python -c \"print(open('a').read())\"",
        "javac -cp .:lib Test.java",
        "perl -MList::Util -e 'print 1'",
        "cat <<EOF | python\nimport os\nprint(os.listdir('.'))\nEOF",
    ] {
        assert_eq!(classify(command), Reads, "{command}");
    }
    assert_eq!(classify("cd .."), Moves);
    assert_eq!(classify("cd src/\ncd main"), Moves);
}
