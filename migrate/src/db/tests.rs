use super::*;

fn args(url: Option<&str>) -> DbArgs {
    DbArgs { database_url: url.map(str::to_owned), database_url_file: None, password_file: None, connect_timeout: 10 }
}

#[test]
fn the_target_never_shows_the_password() {
    let t = Target::from_args(&args(Some("mysql://migrator:s3cret-pw@db.example:3307/shop"))).unwrap();
    assert_eq!(t.display, "migrator@db.example:3307/shop");
    assert!(!format!("{t:?}").contains("s3cret"), "{t:?}");
    assert_eq!(t.schema, "shop");
}

#[test]
fn bad_urls_say_what_to_write_without_repeating_the_url() {
    let e = Target::from_args(&args(None)).unwrap_err().to_string();
    assert!(e.contains("--database-url"), "{e}");
    let e = Target::from_args(&args(Some("mysql://migrator:s3cret@db.example:3306"))).unwrap_err().to_string();
    assert!(e.contains("names no schema"), "{e}");
    let e = Target::from_args(&args(Some("postgres://u:s3cret@h/db"))).unwrap_err().to_string();
    assert!(!e.contains("s3cret") && e.contains("expected mysql://"), "{e}");
}

#[test]
fn the_password_file_overrides_the_url_and_loses_its_newline() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "from-file\n").unwrap();
    let a = DbArgs { password_file: Some(pw), ..args(Some("mysql://migrator@db.example:3306/shop")) };
    let t = Target::from_args(&a).unwrap();
    assert_eq!(t.opts.pass(), Some("from-file"));
    let missing = DbArgs { password_file: Some(dir.path().join("none")), ..a };
    let e = Target::from_args(&missing).unwrap_err().to_string();
    assert!(e.contains("failed to read the password from"), "{e}");
}

#[test]
fn attack_passwords_with_url_characters_never_reach_a_printable_field() {
    // Unencoded, the part after `/`, `?` or `#` would become port, schema or query — and be logged.
    for url in [
        "mysql://migrator:1234/SECRETPW@127.0.0.1:3306/app",
        "mysql://migrator:SE#CRETPW@127.0.0.1:3306/app",
        "mysql://migrator:SE?CRETPW@127.0.0.1:3306/app",
    ] {
        let e = Target::from_args(&args(Some(url))).unwrap_err().to_string();
        assert!(!e.contains("SECRET") && !e.contains("CRETPW") && e.contains("percent-encoded"), "{e}");
    }
    // `@` and `:` in a password are read right; percent-encoded characters are decoded.
    let t = Target::from_args(&args(Some("mysql://migrator:p@ss:w%2Frd%23%25@127.0.0.1:3306/app"))).unwrap();
    assert_eq!(t.display, "migrator@127.0.0.1:3306/app");
    assert_eq!(t.opts.pass(), Some("p@ss:w/rd#%"));
    assert!(!format!("{t:?}").contains("ss:w"), "{t:?}");
    // No scheme: refused without the password.
    let e = Target::from_args(&args(Some("migrator:SECRETPW@127.0.0.1:3306/app"))).unwrap_err().to_string();
    assert!(!e.contains("SECRETPW"), "{e}");
}

#[test]
fn attack_the_password_as_written_and_as_read_is_redacted_from_server_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "Fi1e-Secret-77\n").unwrap();
    let a = DbArgs { password_file: Some(pw), ..args(Some("mysql://migrator:Url%2FSecret-88@db.example:3306/shop")) };
    Target::from_args(&a).unwrap();
    // What the server says when a revision is a link to the URL file or the password file.
    for quoted in ["mysql://migrator:Url%2FSecret-88@db.example:3306/shop", "Url/Secret-88", "Fi1e-Secret-77\n"] {
        let e = mysql_async::Error::Server(mysql_async::ServerError {
            code: 1064,
            message: format!("You have an error in your SQL syntax; check the manual near '{quoted}' at line 1"),
            state: "42000".into(),
        });
        for shown in [crate::classify::describe(&e), DbError::Query(e).to_string()] {
            assert!(!shown.contains("Secret"), "{shown}");
            assert!(shown.contains("ERROR 1064") && shown.contains("(redacted)"), "{shown}");
        }
    }
}

#[test]
fn attack_a_password_file_keeps_inner_and_trailing_spaces_but_not_one_line_end() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "p w \r\n").unwrap();
    let a = DbArgs { password_file: Some(pw), ..args(Some("mysql://migrator@db.example:3306/shop")) };
    assert_eq!(Target::from_args(&a).unwrap().opts.pass(), Some("p w "));
}

#[test]
fn attack_the_run_lock_name_fits_the_server_for_any_schema() {
    assert_eq!(run_lock_name("app"), "bloodraven-migrate:app");
    let long = "s".repeat(64);
    let n = run_lock_name(&long);
    assert!(n.len() <= 64 && n.starts_with("bloodraven-migrate:"), "{n}");
    assert_ne!(n, run_lock_name(&"t".repeat(64)), "distinct schemas, distinct locks");
}
