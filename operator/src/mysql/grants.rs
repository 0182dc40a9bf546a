//! Who can write through `read_only` on MariaDB, from what its grant tables
//! show: an account holds the privilege (`READ_ONLY ADMIN`, and `SUPER`
//! before 10.11) itself, through a role granted to it (a default role or
//! not: it can `SET ROLE`), through roles granted to that role, and so on,
//! or through `PUBLIC` (10.11 and later), whose grants every account holds.
//!
//! What MariaDB 10.11.19 shows (checked on a server):
//! - `information_schema.USER_PRIVILEGES` lists login accounts only, never a
//!   role nor `PUBLIC`; `GRANTEE` is `'user'@'host'` with nothing escaped
//!   (user `o'ne\il` is `'o'ne\il'@'%'`).
//! - `mysql.roles_mapping` has one row per role grant, `(Host, User, Role,
//!   Admin_option)`; the grantee is a role or `PUBLIC` when `Host` is empty
//!   (a user created with host `''` gets `'%'`), e.g. `('', 'r_outer',
//!   'r_ro')`, `('%', 'viagrant', 'r_outer')`, `('', 'PUBLIC', 'r_pub')`.
//!   A role's creator gets it `WITH ADMIN OPTION` (a row like any other).
//! - A role's own privileges show in `SHOW GRANTS FOR `role`` only, with
//!   those of the roles granted to it: `GRANT READ_ONLY ADMIN ON *.* TO
//!   `r_ro``, `GRANT READ_ONLY ADMIN ON *.* TO PUBLIC`. Every account may
//!   run `SHOW GRANTS FOR PUBLIC`; other roles need `SELECT` on `mysql`.

use std::collections::{BTreeMap, HashSet};

/// The role whose grants every account holds (MariaDB 10.11 and later).
pub(crate) const PUBLIC: &str = "PUBLIC";

/// How [`PUBLIC`] is named in the list, first.
pub(crate) const PUBLIC_SHOWN: &str = "PUBLIC (every account)";

/// What a site shows of its grants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Grants {
    /// Login accounts that hold the privilege themselves, as
    /// `USER_PRIVILEGES.GRANTEE` (`'user'@'host'`).
    pub accounts: Vec<String>,
    /// Roles that hold it themselves (or through roles granted to them),
    /// [`PUBLIC`] among them when it does.
    pub roles: Vec<String>,
    /// `mysql.roles_mapping`: `(User, Host, Role)`; an empty `Host` makes
    /// the grantee a role (or [`PUBLIC`]).
    pub mapping: Vec<(String, String, String)>,
}

/// An account as `USER_PRIVILEGES.GRANTEE` writes it (nothing escaped).
pub(crate) fn grantee(user: &str, host: &str) -> String {
    format!("'{user}'@'{host}'")
}

/// The operator's own account as [`grantee`] writes it, from
/// `CURRENT_USER()` (`user@host`; the host holds no `@`). `None` when it is
/// not of that shape: then nothing is excluded.
pub(crate) fn current_user(current: &str) -> Option<String> {
    current.rsplit_once('@').map(|(user, host)| grantee(user, host))
}

/// The accounts other than `me` (exactly that account, as [`grantee`]
/// writes it) that hold the privilege, directly or through roles, sorted;
/// [`PUBLIC_SHOWN`] first when `public` (10.11 and later) and `PUBLIC`
/// holds it. An account that holds it only through a role is followed by
/// ` through role 'name'` (a role granted to it, the first by name).
pub(crate) fn bypass_accounts(grants: &Grants, me: Option<&str>, public: bool) -> Vec<String> {
    // Roles that hold it: those that do themselves, then those granted one
    // that does, until nothing changes (a cycle, which MariaDB refuses to
    // make anyway, only stops the growth).
    let mut holding: HashSet<&str> = grants.roles.iter().map(String::as_str).collect();
    loop {
        let before = holding.len();
        for (user, host, role) in &grants.mapping {
            if host.is_empty() && holding.contains(role.as_str()) {
                holding.insert(user.as_str());
            }
        }
        if holding.len() == before {
            break;
        }
    }
    // Account -> the role it holds it through (`None`: itself).
    let mut found: BTreeMap<String, Option<&str>> = BTreeMap::new();
    for account in &grants.accounts {
        found.insert(account.clone(), None);
    }
    for (user, host, role) in &grants.mapping {
        if host.is_empty() || !holding.contains(role.as_str()) {
            continue;
        }
        let through = found.entry(grantee(user, host)).or_insert(Some(role.as_str()));
        if let Some(r) = through
            && role.as_str() < *r
        {
            *through = Some(role.as_str());
        }
    }
    let mut out = Vec::with_capacity(found.len() + 1);
    if public && holding.contains(PUBLIC) {
        out.push(PUBLIC_SHOWN.to_owned());
    }
    out.extend(found.into_iter().filter(|(account, _)| Some(account.as_str()) != me).map(|(account, through)| {
        match through {
            Some(role) => format!("{account} through role '{role}'"),
            None => account,
        }
    }));
    out
}

/// Whether the lines of `SHOW GRANTS FOR` a role grant one of `privileges`
/// (names as MariaDB writes them, e.g. `READ_ONLY ADMIN`) on `*.*`; `ALL
/// PRIVILEGES` on `*.*` counts. A line is `GRANT <privileges> ON <what> TO
/// <grantee>...` or, for a role grant, ``GRANT `role` TO ...`` (skipped):
/// privilege names hold neither a backtick nor ` ON `, so names that come
/// after them cannot change what is read.
pub(crate) fn show_grants_hold(lines: &[String], privileges: &[&str]) -> bool {
    lines.iter().any(|line| {
        let Some(rest) = line.strip_prefix("GRANT ") else { return false };
        if rest.starts_with('`') {
            return false;
        }
        let Some((privs, what)) = rest.split_once(" ON ") else { return false };
        what.starts_with("*.* TO ")
            && privs.split(',').map(str::trim).any(|p| p == "ALL PRIVILEGES" || privileges.contains(&p))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use proptest::prelude::*;

    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    fn map(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        rows.iter().map(|(u, h, r)| ((*u).to_owned(), (*h).to_owned(), (*r).to_owned())).collect()
    }

    const ME: Option<&str> = Some("'bloodraven'@'127.0.0.1'");

    #[test]
    fn roles_default_or_not_and_roles_of_roles_count() {
        // The shapes of MariaDB 10.11.19 (module header).
        let g = Grants {
            accounts: s(&["'app'@'%'", "'bloodraven'@'127.0.0.1'", "'bloodraven'@'%'"]),
            roles: s(&["r_ro"]),
            mapping: map(&[
                ("root", "localhost", "r_ro"),
                ("r_outer", "", "r_ro"),
                ("viadefault", "%", "r_ro"),
                ("viagrant", "%", "r_outer"),
                ("viagrant", "%", "r_adm"),
                ("plain", "%", "r_adm"),
            ]),
        };
        assert_eq!(
            bypass_accounts(&g, ME, true),
            s(&[
                "'app'@'%'",
                "'bloodraven'@'%'",
                "'root'@'localhost' through role 'r_ro'",
                "'viadefault'@'%' through role 'r_ro'",
                "'viagrant'@'%' through role 'r_outer'",
            ])
        );
    }

    #[test]
    fn only_the_exact_current_account_is_left_out() {
        assert_eq!(current_user("bloodraven@127.0.0.1").as_deref(), ME);
        assert_eq!(current_user("a@b@10.%").as_deref(), Some("'a@b'@'10.%'"));
        let g = Grants {
            accounts: s(&["'bloodraven'@'127.0.0.1'", "'bloodraven'@'%'", "'bloodraven'@'localhost'"]),
            ..Grants::default()
        };
        assert_eq!(bypass_accounts(&g, ME, true), s(&["'bloodraven'@'%'", "'bloodraven'@'localhost'"]));
        assert_eq!(bypass_accounts(&g, None, true).len(), 3);
    }

    #[test]
    fn a_role_the_operator_holds_still_counts_for_others() {
        let g = Grants {
            roles: s(&["ops"]),
            mapping: map(&[("bloodraven", "127.0.0.1", "ops"), ("app", "%", "ops")]),
            ..Grants::default()
        };
        assert_eq!(bypass_accounts(&g, ME, true), s(&["'app'@'%' through role 'ops'"]));
    }

    #[test]
    fn public_is_named_first_when_it_holds_it_itself_or_through_a_role() {
        let direct = Grants { accounts: s(&["'app'@'%'"]), roles: s(&[PUBLIC]), ..Grants::default() };
        assert_eq!(bypass_accounts(&direct, ME, true), s(&[PUBLIC_SHOWN, "'app'@'%'"]));
        let through = Grants { roles: s(&["r_pub"]), mapping: map(&[("PUBLIC", "", "r_pub")]), ..Grants::default() };
        assert_eq!(bypass_accounts(&through, ME, true), s(&[PUBLIC_SHOWN]));
        // Before 10.11 a role named PUBLIC is a role like any other.
        assert!(bypass_accounts(&direct, ME, false).iter().all(|a| a != PUBLIC_SHOWN));
        assert!(bypass_accounts(&Grants::default(), ME, true).is_empty());
    }

    #[test]
    fn a_cycle_ends() {
        let g = Grants {
            roles: s(&["c"]),
            mapping: map(&[("a", "", "b"), ("b", "", "a"), ("a", "", "c"), ("u", "%", "b")]),
            ..Grants::default()
        };
        assert_eq!(bypass_accounts(&g, ME, true), s(&["'u'@'%' through role 'b'"]));
    }

    #[test]
    fn show_grants_lines_as_mariadb_writes_them() {
        let ro = ["READ_ONLY ADMIN"];
        let old = ["READ_ONLY ADMIN", "SUPER"];
        let hold = |lines: &[&str], p: &[&str]| show_grants_hold(&s(lines), p);
        assert!(hold(&["GRANT READ_ONLY ADMIN ON *.* TO `r_ro`"], &ro));
        assert!(hold(&["GRANT `r_pub` TO PUBLIC", "GRANT READ_ONLY ADMIN ON *.* TO PUBLIC"], &ro));
        assert!(hold(&["GRANT PROCESS, READ_ONLY ADMIN, SLAVE MONITOR ON *.* TO `r` WITH GRANT OPTION"], &ro));
        assert!(hold(&["GRANT ALL PRIVILEGES ON *.* TO `r`"], &ro));
        assert!(!hold(&["GRANT SUPER ON *.* TO `r`"], &ro));
        assert!(hold(&["GRANT SUPER ON *.* TO `r`"], &old));
        assert!(!hold(&["GRANT USAGE ON *.* TO `r`", "GRANT `r_ro` TO `r`"], &ro));
        assert!(!hold(&["GRANT ALL PRIVILEGES ON `app`.* TO `r`"], &ro));
        // A role's name cannot pose as a privilege.
        assert!(!hold(&["GRANT `READ_ONLY ADMIN ON *.* TO x` TO `r`"], &ro));
        assert!(!hold(&["GRANT USAGE ON *.* TO `READ_ONLY ADMIN`"], &ro));
        assert!(!hold(&[], &ro));
    }

    /// The accounts that reach a holder, by a search from each account.
    fn reference(g: &Grants, me: Option<&str>, public: bool) -> BTreeSet<String> {
        let mut edges: HashMap<(String, bool), Vec<String>> = HashMap::new();
        for (u, h, r) in &g.mapping {
            let from = if h.is_empty() { (u.clone(), true) } else { (grantee(u, h), false) };
            edges.entry(from).or_default().push(r.clone());
        }
        let reaches = |start: (String, bool)| {
            let mut seen = HashSet::new();
            let mut todo = vec![start];
            while let Some(n) = todo.pop() {
                if !seen.insert(n.clone()) {
                    continue;
                }
                let held = if n.1 { g.roles.contains(&n.0) } else { g.accounts.contains(&n.0) };
                if held {
                    return true;
                }
                todo.extend(edges.get(&n).into_iter().flatten().map(|r| (r.clone(), true)));
            }
            false
        };
        let mut accounts: BTreeSet<String> = g.accounts.iter().cloned().collect();
        accounts.extend(g.mapping.iter().filter(|(_, h, _)| !h.is_empty()).map(|(u, h, _)| grantee(u, h)));
        let mut out: BTreeSet<String> =
            accounts.into_iter().filter(|a| Some(a.as_str()) != me && reaches((a.clone(), false))).collect();
        if public && reaches((PUBLIC.to_owned(), true)) {
            out.insert(PUBLIC_SHOWN.to_owned());
        }
        out
    }

    fn grants() -> impl Strategy<Value = Grants> {
        // Accounts u0..u3 on two hosts (u0@h0 is the operator), roles
        // r0..r3 and PUBLIC; any role grant, cycles included.
        let account = (0u8..4, 0u8..2).prop_map(|(u, h)| (format!("u{u}"), format!("h{h}")));
        let role = prop_oneof![4 => (0u8..4).prop_map(|r| format!("r{r}")), 1 => Just(PUBLIC.to_owned())];
        let grantee_node = prop_oneof![account.clone(), role.clone().prop_map(|r| (r, String::new()))];
        (
            proptest::collection::vec(account.prop_map(|(u, h)| grantee(&u, &h)), 0..4),
            proptest::collection::vec(role.clone(), 0..3),
            proptest::collection::vec((grantee_node, role).prop_map(|((u, h), r)| (u, h, r)), 0..12),
        )
            .prop_map(|(accounts, roles, mapping)| Grants { accounts, roles, mapping })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The closure names exactly the accounts (and PUBLIC) that reach a
        /// holder through role grants, never the operator's own account,
        /// each once.
        #[test]
        fn closure_agrees_with_a_search_from_each_account(g in grants(), public in any::<bool>()) {
            let me = Some("'u0'@'h0'");
            let got = bypass_accounts(&g, me, public);
            let names: Vec<String> = got
                .iter()
                .map(|a| a.split_once(" through role ").map_or(a.as_str(), |(a, _)| a).to_owned())
                .collect();
            let unique: BTreeSet<String> = names.iter().cloned().collect();
            prop_assert_eq!(unique.len(), names.len());
            prop_assert_eq!(unique, reference(&g, me, public));
            if let Some(first) = got.iter().position(|a| a == PUBLIC_SHOWN) {
                prop_assert_eq!(first, 0);
            }
        }
    }
}
