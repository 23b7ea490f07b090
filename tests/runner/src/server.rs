//! The Kubernetes a control plane of the suite runs: its minor and the
//! kube-apiserver feature gates the tests care about, handed to
//! `deploy/local/up` as its environment (`SHARDCRON_KUBERNETES`,
//! `SHARDCRON_SHARDED_WATCH`, `SHARDCRON_WATCH_LIST`, and
//! `KUBE_APISERVER_EXTRA_ARGS` for alpha gates), which a lane's own
//! control plane inherits too.

/// The oldest supported minor: the lanes of the plane beside upstream's
/// controller run on it (the managed path: CRD mode, kube-controller-
/// manager's CronJob controller on).
pub const OLDEST: &str = "1.34";
/// The newest supported minor: the plain plane's lanes run on it.
pub const NEWEST: &str = "1.37";
/// deploy/local's default (its go.mod's): the lanes with a control plane
/// of their own.
pub const DEFAULT: &str = "1.36";
/// Every supported minor, oldest first.
pub const MINORS: [&str; 4] = ["1.34", "1.35", "1.36", "1.37"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Server {
    pub kubernetes: &'static str,
    /// kube-apiserver's `ShardedListAndWatch` gate (alpha, 1.36 on): off
    /// unless a lane asks, as on the clusters users run.
    pub sharded_watch: bool,
    /// kube-apiserver's `WatchList` (streaming lists): on, as each
    /// minor's default, unless a lane asks for a server without it.
    pub watch_list: bool,
    /// More kube-apiserver feature gates (`Gate=true,...`), for a lane
    /// that needs a field only an alpha gate keeps.
    pub alpha_gates: &'static str,
}

/// 1.37's alpha gates that keep two fields of the pod template which
/// this build's Kubernetes types (1.36) do not know: `emptyDir.mode` and
/// an HTTP probe's `protocol` (tests/job_parity.rs).
pub const NEWER_FIELDS_GATES: &str = "EmptyDirVolumeMode=true,H2CContainerProbe=true";

impl Server {
    pub const fn on(kubernetes: &'static str) -> Server {
        Server {
            kubernetes,
            sharded_watch: false,
            watch_list: true,
            alpha_gates: "",
        }
    }

    pub const fn with_alpha_gates(self, alpha_gates: &'static str) -> Server {
        Server {
            alpha_gates,
            ..self
        }
    }

    pub const fn with_sharded_watch(self) -> Server {
        Server {
            sharded_watch: true,
            ..self
        }
    }

    pub const fn without_watch_list(self) -> Server {
        Server {
            watch_list: false,
            ..self
        }
    }

    /// `deploy/local/up`'s environment for it.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let flag = |on: bool| if on { "1" } else { "0" }.to_owned();
        let mut env = vec![
            ("SHARDCRON_KUBERNETES", self.kubernetes.to_owned()),
            ("SHARDCRON_SHARDED_WATCH", flag(self.sharded_watch)),
            ("SHARDCRON_WATCH_LIST", flag(self.watch_list)),
        ];
        if !self.alpha_gates.is_empty() {
            let gates = format!("--feature-gates={}", self.alpha_gates);
            env.push(("KUBE_APISERVER_EXTRA_ARGS", gates));
        }
        env
    }

    /// As the suite prints it: `1.34`, `1.36 gate on`, `1.34 without WatchList`.
    pub fn label(&self) -> String {
        let mut label = self.kubernetes.to_owned();
        if self.sharded_watch {
            label.push_str(" gate on");
        }
        if !self.watch_list {
            label.push_str(" without WatchList");
        }
        if !self.alpha_gates.is_empty() {
            label.push_str(&format!(" with {}", self.alpha_gates));
        }
        label
    }

    /// The server `--kubernetes`, `--sharded-watch` and `--without-watch-list`
    /// among `args` ask for, for every control plane, if any does.
    pub fn forced_by(args: &[String]) -> Result<Option<Server>, String> {
        let mut server = Server::on(DEFAULT);
        let mut forced = false;
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--kubernetes" => {
                    let minor = args.next().ok_or("--kubernetes needs a minor")?;
                    server.kubernetes = MINORS
                        .into_iter()
                        .find(|m| m == minor)
                        .ok_or_else(|| format!("--kubernetes: one of {MINORS:?}, not {minor}"))?;
                }
                "--sharded-watch" => server.sharded_watch = true,
                "--without-watch-list" => server.watch_list = false,
                _ => continue,
            }
            forced = true;
        }
        Ok(forced.then_some(server))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_options_force_one_server_for_every_plane() {
        assert_eq!(Server::forced_by(&args(&["controller"])), Ok(None));
        assert_eq!(
            Server::forced_by(&args(&["--kubernetes", "1.34", "controller"])),
            Ok(Some(Server::on("1.34")))
        );
        assert_eq!(
            Server::forced_by(&args(&["--sharded-watch", "crd"])),
            Ok(Some(Server::on(DEFAULT).with_sharded_watch()))
        );
        assert_eq!(
            Server::forced_by(&args(&["--kubernetes", "1.35", "--without-watch-list"])),
            Ok(Some(Server::on("1.35").without_watch_list()))
        );
        assert!(Server::forced_by(&args(&["--kubernetes", "1.99"])).is_err());
        assert!(Server::forced_by(&args(&["--kubernetes"])).is_err());
    }

    #[test]
    fn the_environment_says_it_to_deploy_local_up() {
        let server = Server::on(OLDEST).without_watch_list();
        let env = |server: Server| -> Vec<(&str, String)> { server.env() };
        let owned = |pairs: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
            pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
        };
        assert_eq!(
            env(server),
            owned(&[
                ("SHARDCRON_KUBERNETES", "1.34"),
                ("SHARDCRON_SHARDED_WATCH", "0"),
                ("SHARDCRON_WATCH_LIST", "0"),
            ])
        );
        assert_eq!(
            env(Server::on(NEWEST).with_alpha_gates(NEWER_FIELDS_GATES)),
            owned(&[
                ("SHARDCRON_KUBERNETES", "1.37"),
                ("SHARDCRON_SHARDED_WATCH", "0"),
                ("SHARDCRON_WATCH_LIST", "1"),
                (
                    "KUBE_APISERVER_EXTRA_ARGS",
                    "--feature-gates=EmptyDirVolumeMode=true,H2CContainerProbe=true"
                ),
            ])
        );
        assert_eq!(server.label(), "1.34 without WatchList");
        assert_eq!(
            Server::on(DEFAULT).with_sharded_watch().label(),
            "1.36 gate on"
        );
    }
}
