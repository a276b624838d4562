//! Every environment variable documented for the functions (docs/behaviour.md §10 and
//! the README's Configuration section) is either set from a template parameter on the
//! functions that read it, or listed in infra/README.md's "Variables that are not
//! parameters" table with the reason.

use super::*;

/// Backticked upper-case names (`SMTP_TLS`, `QUEUE_URL_<FUNCTION>`) in `text`.
fn variable_names(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|v| {
            v.len() > 3
                && v.contains('_')
                && v.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && v.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "_<>".contains(c))
        })
        .map(str::to_string)
        .collect()
}

/// The section of `text` from the heading line containing `marker` to the next heading
/// of the same level.
fn section<'a>(text: &'a str, marker: &str) -> &'a str {
    let at = text.find(marker).unwrap_or_else(|| panic!("no {marker:?}"));
    let line = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let level = text[line..].chars().take_while(|c| *c == '#').count();
    assert!(level > 0, "{marker:?} is not in a heading");
    let next = format!("\n{} ", "#".repeat(level));
    let rest = &text[line..];
    &rest[..rest.find(&next).unwrap_or(rest.len())]
}

/// Documented variables with the functions that read them (`None`: all, or the doc
/// names none of the functions).
fn documented() -> BTreeMap<String, Option<BTreeSet<String>>> {
    let behaviour = std::fs::read_to_string(root().join("docs/behaviour.md")).unwrap();
    let table = section(&behaviour, "<a id=\"c10\"></a>");
    let mut out: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let row = row.replace("\\|", "/");
        let cols: Vec<&str> = row.split('|').collect();
        let users: BTreeSet<String> = Function::ALL
            .iter()
            .map(|f| f.name().to_string())
            .filter(|n| cols[2].contains(n.as_str()))
            .collect();
        let users = (!users.is_empty()).then_some(users);
        for v in variable_names(cols[1]) {
            out.insert(v, users.clone());
        }
    }
    assert!(out.len() >= 25, "§10 lists {} variables", out.len());
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for v in variable_names(section(&readme, "## Configuration\n")) {
        out.entry(v).or_insert(None);
    }
    out
}

/// infra/README.md's table of variables that are not parameters: name → reason.
fn not_parameters() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root().join("infra/README.md")).unwrap();
    let table = section(&text, "Variables that are not parameters");
    let mut out = BTreeMap::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let cols: Vec<&str> = row.split('|').collect();
        let why = cols[2].trim().to_string();
        assert!(why.len() > 10, "{row}: give the reason");
        for v in variable_names(cols[1]) {
            out.insert(v, why.clone());
        }
    }
    out
}

/// The parameter a variable's value comes from, if any (`!Ref P`).
fn parameter_of<'a>(t: &'a Value, v: &'a Value) -> Option<&'a str> {
    match v {
        Value::Tagged(tag) if tag.tag == "!Ref" => tag
            .value
            .as_str()
            .filter(|p| !t["Parameters"][*p].is_null()),
        Value::Tagged(tag) if tag.tag == "!If" => tag
            .value
            .as_sequence()
            .into_iter()
            .flat_map(|s| s.iter().skip(1))
            .find_map(|branch| parameter_of(t, branch)),
        _ => None,
    }
}

#[test]
fn every_documented_variable_is_a_parameter_of_its_functions_or_documented_as_not_one() {
    let t = template();
    let globals = &t["Globals"]["Function"]["Environment"]["Variables"];
    let env_of = |f: Function, var: &str| -> Option<Value> {
        let c = camel(f.name());
        let own =
            &resource(&t, &format!("{c}Function"))["Properties"]["Environment"]["Variables"][var];
        let v = if own.is_null() { &globals[var] } else { own };
        (!v.is_null()).then(|| v.clone())
    };
    let not = not_parameters();
    let docs = documented();
    for (var, users) in &docs {
        if let Some(why) = not.get(var) {
            // Not a parameter: no function may get it from one.
            for f in Function::ALL.iter().copied() {
                if let Some(v) = env_of(f, var) {
                    assert!(
                        parameter_of(&t, &v).is_none(),
                        "{var} is listed as not a parameter ({why}) but {f} gets it from one"
                    );
                }
            }
            continue;
        }
        let readers: Vec<Function> = match users {
            Some(names) => names
                .iter()
                .map(|n| Function::from_name(n).unwrap())
                .collect(),
            None => {
                assert!(
                    !globals[var.as_str()].is_null(),
                    "{var}: read by every function, so it must be in Globals or in \
                     infra/README.md's \"Variables that are not parameters\""
                );
                Function::ALL.to_vec()
            }
        };
        for f in readers {
            let v = env_of(f, var).unwrap_or_else(|| {
                panic!(
                    "{var} is documented for {f} but the template does not pass it (make it a \
                     parameter, or list it in infra/README.md's \"Variables that are not parameters\")"
                )
            });
            assert!(
                parameter_of(&t, &v).is_some(),
                "{var} of {f} is {v:?}, not a template parameter"
            );
        }
    }
    // The list names documented variables only.
    for var in not.keys() {
        assert!(
            docs.contains_key(var),
            "{var}: not documented, drop it from the list"
        );
    }
    // The ones issue 35 found missing.
    for var in [
        "WEBHOOK_ALLOW_LOCAL_NETWORK",
        "SMTP_CA_BUNDLE",
        "GITLAB_SSH_URL_PREFIX",
        "WEBHOOK_LOG_HOST",
        "WEBHOOK_TIMEOUT_S",
        "SMTP_TLS",
    ] {
        assert!(docs.contains_key(var) && !not.contains_key(var), "{var}");
    }
}

#[test]
fn the_smtp_and_web_hook_parameters_allow_what_the_functions_accept() {
    let t = template();
    let allowed = |p: &str| t["Parameters"][p]["AllowedValues"].clone();
    assert_eq!(
        allowed("SmtpTls"),
        serde_yaml::to_value(["starttls", "implicit", "none"]).unwrap()
    );
    assert_eq!(t["Parameters"]["SmtpTls"]["Default"], "starttls");
    // The environment may only narrow GitLab's own setting.
    let d = t["Parameters"]["WebhookAllowLocalNetwork"]["Description"]
        .as_str()
        .unwrap();
    assert!(d.contains("may only narrow GitLab's"), "{d}");
    assert_eq!(t["Parameters"]["WebhookAllowLocalNetwork"]["Default"], "");
}
