//! Who a request forwarded by kube-apiserver's aggregation layer is for,
//! decided as an extension API server decides it (Kubernetes'
//! "request-header" authentication): the connection presents a client
//! certificate signed by the request-header CA, with a name kube-apiserver
//! is allowed to use, and then the caller is whoever the `X-Remote-*`
//! headers say. Anything else is refused: these headers from any other
//! client would let it claim to be anyone. Pure: the certificate is
//! verified by TLS, its name and the headers are passed in.
//!
//! The settings are those kube-apiserver publishes in
//! `kube-system/extension-apiserver-authentication`.

use k8s_openapi::api::authentication::v1::UserInfo;
use std::collections::BTreeMap;
use thiserror::Error;

/// Where kube-apiserver publishes its request-header settings.
pub const CONFIG_MAP_NAMESPACE: &str = "kube-system";
pub const CONFIG_MAP_NAME: &str = "extension-apiserver-authentication";

/// kube-apiserver's request-header settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeaderSettings {
    /// The CA that signs the aggregation layer's client certificate (PEM).
    pub client_ca_pem: String,
    /// The common names the client certificate may have; empty: any the
    /// CA signed.
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SettingsError {
    #[error(
        "{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME} has no requestheader-client-ca-file: kube-apiserver runs without the aggregation layer (--requestheader-client-ca-file)"
    )]
    NoClientCa,
    #[error("{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME}: {key} is not a JSON list of strings")]
    NotAList { key: String },
    #[error(
        "{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME} names no requestheader-username-headers: no caller could be known"
    )]
    NoUsernameHeader,
}

impl RequestHeaderSettings {
    /// From the ConfigMap's data.
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Result<Self, SettingsError> {
        let client_ca_pem = data
            .get("requestheader-client-ca-file")
            .filter(|pem| !pem.trim().is_empty())
            .ok_or(SettingsError::NoClientCa)?
            .clone();
        let list = |key: &str| -> Result<Vec<String>, SettingsError> {
            match data.get(key) {
                None => Ok(Vec::new()),
                Some(text) if text.trim().is_empty() => Ok(Vec::new()),
                Some(text) => serde_json::from_str(text).map_err(|_| SettingsError::NotAList {
                    key: key.to_owned(),
                }),
            }
        };
        let settings = Self {
            client_ca_pem,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            uid_headers: list("requestheader-uid-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_prefixes: list("requestheader-extra-headers-prefix")?,
        };
        if settings.username_headers.is_empty() {
            return Err(SettingsError::NoUsernameHeader);
        }
        Ok(settings)
    }
}

/// Why a request was not taken as forwarded by kube-apiserver.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NotForwarded {
    #[error(
        "no client certificate of the aggregation layer: this API is reached through the API server (kubectl get --raw /apis/admin.shardcron.io/...)"
    )]
    NoCertificate,
    #[error("the client certificate's name {0:?} is not one kube-apiserver may use")]
    NameNotAllowed(String),
    #[error("the API server forwarded no user")]
    NoUser,
}

/// The caller of a request that came over a connection whose client
/// certificate (verified against [`RequestHeaderSettings::client_ca_pem`])
/// has the common name `certificate_name`, with `headers` (names in any
/// case, each value as sent; a header sent twice is two entries).
pub fn caller(
    settings: &RequestHeaderSettings,
    certificate_name: Option<&str>,
    headers: &[(&str, &str)],
) -> Result<UserInfo, NotForwarded> {
    let name = certificate_name.ok_or(NotForwarded::NoCertificate)?;
    if !settings.allowed_names.is_empty() && !settings.allowed_names.iter().any(|n| n == name) {
        return Err(NotForwarded::NameNotAllowed(name.to_owned()));
    }
    let values = |wanted: &[String]| -> Vec<String> {
        wanted
            .iter()
            .flat_map(|header| {
                headers
                    .iter()
                    .filter(move |(name, _)| name.eq_ignore_ascii_case(header))
                    .map(|(_, value)| value.to_string())
            })
            .collect()
    };
    // The first username header that has a value, as Kubernetes reads it.
    let username = settings
        .username_headers
        .iter()
        .find_map(|header| {
            headers
                .iter()
                .find(|(name, value)| name.eq_ignore_ascii_case(header) && !value.is_empty())
                .map(|(_, value)| value.to_string())
        })
        .ok_or(NotForwarded::NoUser)?;
    let uid = values(&settings.uid_headers).into_iter().next();
    let groups = values(&settings.group_headers);
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let Some(key) = settings
            .extra_prefixes
            .iter()
            .find_map(|prefix| lower.strip_prefix(&prefix.to_ascii_lowercase()))
        else {
            continue;
        };
        // Keys are percent-encoded (a key may hold `/` or upper case).
        let key = unescape(key).to_ascii_lowercase();
        if !key.is_empty() {
            extra.entry(key).or_default().push(value.to_string());
        }
    }
    Ok(UserInfo {
        username: Some(username),
        uid,
        groups: (!groups.is_empty()).then_some(groups),
        extra: (!extra.is_empty()).then_some(extra),
    })
}

/// `%XX` sequences decoded (invalid ones kept as they are).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[at], bytes.get(at + 1), bytes.get(at + 2)) {
            (b'%', Some(&high), Some(&low)) if hex(high).is_some() && hex(low).is_some() => {
                out.push((hex(high).unwrap_or(0) * 16 + hex(low).unwrap_or(0)) as u8);
                at += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local_plane() -> BTreeMap<String, String> {
        // As deploy/local/up's kube-apiserver publishes them.
        [
            (
                "requestheader-client-ca-file",
                "-----BEGIN CERTIFICATE-----\n...",
            ),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            (
                "requestheader-extra-headers-prefix",
                r#"["X-Remote-Extra-"]"#,
            ),
            ("client-ca-file", "-----BEGIN CERTIFICATE-----\n..."),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[test]
    fn the_settings_are_read_from_kube_apiservers_config_map() {
        let settings = RequestHeaderSettings::from_config_map(&local_plane()).expect("valid");
        assert_eq!(settings.allowed_names, ["front-proxy-client"]);
        assert_eq!(settings.username_headers, ["X-Remote-User"]);
        assert!(settings.uid_headers.is_empty());
        let without = |key: &str| {
            let mut data = local_plane();
            data.remove(key);
            RequestHeaderSettings::from_config_map(&data)
        };
        assert_eq!(
            without("requestheader-client-ca-file"),
            Err(SettingsError::NoClientCa)
        );
        assert_eq!(
            without("requestheader-username-headers"),
            Err(SettingsError::NoUsernameHeader)
        );
        let mut bad = local_plane();
        bad.insert(
            "requestheader-group-headers".into(),
            "X-Remote-Group".into(),
        );
        assert!(matches!(
            RequestHeaderSettings::from_config_map(&bad),
            Err(SettingsError::NotAList { .. })
        ));
    }

    #[test]
    fn the_caller_is_who_the_headers_say_only_over_the_aggregators_certificate() {
        let settings = RequestHeaderSettings::from_config_map(&local_plane()).expect("valid");
        let headers = [
            ("x-remote-user", "alice"),
            ("X-Remote-Group", "team-a"),
            ("X-Remote-Group", "system:authenticated"),
            ("X-Remote-Extra-Scopes", "openid"),
            ("X-Remote-Extra-Acme.com%2Fproject", "p1"),
            ("X-Remote-Extra-Scopes", "email"),
            ("Authorization", "Bearer not-read"),
        ];
        let alice = caller(&settings, Some("front-proxy-client"), &headers).expect("alice");
        assert_eq!(alice.username.as_deref(), Some("alice"));
        assert_eq!(
            alice.groups,
            Some(vec!["team-a".into(), "system:authenticated".into()])
        );
        let extra = alice.extra.expect("extra");
        assert_eq!(extra["scopes"], ["openid", "email"]);
        assert_eq!(extra["acme.com/project"], ["p1"]);

        // (certificate name, headers) -> refusal
        type Headers<'a> = &'a [(&'a str, &'a str)];
        let table: [(Option<&str>, Headers, NotForwarded); 4] = [
            (None, &headers, NotForwarded::NoCertificate),
            (
                Some("someone-else"),
                &headers,
                NotForwarded::NameNotAllowed("someone-else".into()),
            ),
            (Some("front-proxy-client"), &[], NotForwarded::NoUser),
            (
                Some("front-proxy-client"),
                &[("X-Remote-User", ""), ("X-Remote-Group", "g")],
                NotForwarded::NoUser,
            ),
        ];
        for (name, headers, refusal) in table {
            assert_eq!(caller(&settings, name, headers), Err(refusal), "{name:?}");
        }
        // No allowed names: any certificate the CA signed.
        let any = RequestHeaderSettings {
            allowed_names: Vec::new(),
            ..settings
        };
        assert!(caller(&any, Some("whatever"), &headers).is_ok());
    }

    #[test]
    fn extra_keys_are_percent_decoded() {
        for (escaped, plain) in [
            ("a%2Fb", "a/b"),
            ("plain", "plain"),
            ("bad%zz", "bad%zz"),
            ("end%2", "end%2"),
        ] {
            assert_eq!(unescape(escaped), plain);
        }
    }
}
