//! `/healthz`, `/livez`, `/readyz` with named checks, per-check paths, `verbose` and `exclude`
//! (spec §11.2).

use crate::lifecycle::Lifecycle;

/// Which health endpoint is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/healthz`
    Healthz,
    /// `/livez`
    Livez,
    /// `/readyz`
    Readyz,
}

impl Endpoint {
    /// The endpoint for a path's first segment.
    pub fn from_segment(segment: &str) -> Option<Endpoint> {
        match segment {
            "healthz" => Some(Endpoint::Healthz),
            "livez" => Some(Endpoint::Livez),
            "readyz" => Some(Endpoint::Readyz),
            _ => None,
        }
    }

    /// The endpoint's path (`/readyz`, …).
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Healthz => "/healthz",
            Endpoint::Livez => "/livez",
            Endpoint::Readyz => "/readyz",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }
}

/// A health answer: status code and plain-text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 200, 404 or 500.
    pub code: u16,
    /// Body text.
    pub body: String,
}

type Check = fn(&Lifecycle) -> Result<(), String>;

fn ok(_: &Lifecycle) -> Result<(), String> {
    Ok(())
}

fn config(lc: &Lifecycle) -> Result<(), String> {
    if lc.config_loaded() {
        Ok(())
    } else {
        Err("no valid config loaded yet".into())
    }
}

fn registration(lc: &Lifecycle) -> Result<(), String> {
    if lc.config_loaded() && lc.delegate_registered() {
        Ok(())
    } else {
        Err("not finished".into())
    }
}

fn discovery(lc: &Lifecycle) -> Result<(), String> {
    if lc.discovery_synced() {
        Ok(())
    } else {
        Err("not finished".into())
    }
}

fn autoregister(lc: &Lifecycle) -> Result<(), String> {
    if lc.delegate_registered() {
        Ok(())
    } else {
        Err("the delegate's group-versions are not registered yet".into())
    }
}

fn shutdown(lc: &Lifecycle) -> Result<(), String> {
    if lc.shutting_down() {
        Err("process is shutting down".into())
    } else {
        Ok(())
    }
}

/// The checks of an endpoint, in registration order.
fn checks(endpoint: Endpoint) -> Vec<(&'static str, Check)> {
    let mut list: Vec<(&'static str, Check)> = vec![("ping", ok), ("log", ok)];
    if endpoint != Endpoint::Livez {
        list.push(("config", config));
        list.push((
            "poststarthook/apiservice-registration-controller",
            registration,
        ));
        list.push(("poststarthook/apiservice-discovery-controller", discovery));
        list.push(("autoregister-completion", autoregister));
    }
    if endpoint == Endpoint::Readyz {
        list.push(("shutdown", shutdown));
    }
    list
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Answers `/<endpoint>` (`check` empty) or `/<endpoint>/<check>` with the raw query string.
pub fn answer(endpoint: Endpoint, check: &str, query: Option<&str>, lc: &Lifecycle) -> Answer {
    let list = checks(endpoint);
    if !check.is_empty() {
        return match list.iter().find(|(name, _)| *name == check) {
            Some((_, f)) => match f(lc) {
                Ok(()) => Answer {
                    code: 200,
                    body: "ok".into(),
                },
                Err(e) => Answer {
                    code: 500,
                    body: format!("internal server error: {e}\n"),
                },
            },
            None => Answer {
                code: 404,
                body: "404 page not found\n".into(),
            },
        };
    }

    let mut verbose = false;
    let mut excludes: Vec<String> = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match decode(key).as_str() {
            "verbose" => verbose = true,
            "exclude" => excludes.push(decode(value)),
            _ => {}
        }
    }

    let mut lines = String::new();
    let mut failed = false;
    for (name, f) in &list {
        if excludes.iter().any(|e| e == name) {
            lines.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        match f(lc) {
            Ok(()) => lines.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                tracing::info!(
                    check = name,
                    endpoint = endpoint.name(),
                    "health check failed: {e}"
                );
                failed = true;
                lines.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    let unmatched: Vec<String> = excludes
        .iter()
        .filter(|e| !list.iter().any(|(name, _)| name == e))
        .map(|e| format!("{e:?}"))
        .collect();
    if !unmatched.is_empty() {
        lines.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            unmatched.join(",")
        ));
    }
    let name = endpoint.name();
    if failed {
        Answer {
            code: 500,
            body: format!("{lines}{name} check failed\n"),
        }
    } else if verbose {
        Answer {
            code: 200,
            body: format!("{lines}{name} check passed\n"),
        }
    } else {
        Answer {
            code: 200,
            body: "ok".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> std::sync::Arc<Lifecycle> {
        let lc = Lifecycle::new();
        lc.set_config_loaded();
        lc.set_delegate_registered();
        lc.set_discovery_synced();
        lc.try_complete();
        lc
    }

    #[test]
    fn passing_plain_and_verbose() {
        let lc = ready();
        assert_eq!(answer(Endpoint::Readyz, "", None, &lc).body, "ok");
        let v = answer(Endpoint::Readyz, "", Some("verbose=false"), &lc);
        assert_eq!(v.code, 200);
        assert!(v.body.starts_with("[+]ping ok\n[+]log ok\n"));
        assert!(v.body.contains("[+]shutdown ok\n"));
        assert!(v.body.ends_with("readyz check passed\n"));
    }

    #[test]
    fn failing_lists_and_withholds_reasons() {
        let lc = Lifecycle::new();
        let a = answer(Endpoint::Readyz, "", None, &lc);
        assert_eq!(a.code, 500);
        assert!(a.body.contains(
            "[-]poststarthook/apiservice-registration-controller failed: reason withheld\n"
        ));
        assert!(a.body.ends_with("readyz check failed\n"));
        let one = answer(
            Endpoint::Readyz,
            "poststarthook/apiservice-registration-controller",
            None,
            &lc,
        );
        assert_eq!(
            (one.code, one.body.as_str()),
            (500, "internal server error: not finished\n")
        );
        assert_eq!(answer(Endpoint::Livez, "", None, &lc).code, 200);
    }

    #[test]
    fn exclude_and_unknown_names() {
        let lc = ready();
        lc.begin_shutdown();
        let a = answer(
            Endpoint::Readyz,
            "",
            Some("verbose&exclude=shutdown&exclude=nope&exclude=poststarthook%2Fapiservice-registration-controller"),
            &lc,
        );
        assert_eq!(a.code, 200, "{}", a.body);
        assert!(a.body.contains("[+]shutdown excluded: ok\n"));
        assert!(a
            .body
            .contains("[+]poststarthook/apiservice-registration-controller excluded: ok\n"));
        assert!(a
            .body
            .contains("warn: some health checks cannot be excluded: no matches for \"nope\"\n"));
        assert_eq!(answer(Endpoint::Healthz, "", None, &lc).code, 200);
        assert_eq!(
            answer(Endpoint::Readyz, "shutdown", None, &lc).body,
            "internal server error: process is shutting down\n"
        );
        assert_eq!(answer(Endpoint::Readyz, "nope", None, &lc).code, 404);
    }
}
