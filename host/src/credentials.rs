//! The OAuth credentials of a running tether's remote backends: one
//! [`Authority`] per backend whose credential tether manages, the access token
//! each of its connections puts on requests, and the execution of the engine's
//! [`tether_core::Action::Authorize`] steps. Both runtimes use it.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tether_core::credential::{AuthStep, CredentialFailure, CredentialUpdate};
use tether_core::{Config, Input, ServerName, Transport};

use crate::http_backend::{BearerSource, InputSink, Spawner};
use crate::oauth::{Authority, CredentialStore, FileStore, LoginDesk, OAuthSettings, SharedCredentials, SharedLogin};
use crate::shared::files::FileShared;
use crate::shared::SharedStore;

/// Every managed credential of one tether process.
pub struct Credentials {
    /// The configuration file the settings come from, re-read on reload.
    path: Option<PathBuf>,
    store: Option<Arc<dyn CredentialStore>>,
    settings: BTreeMap<String, OAuthSettings>,
    authorities: BTreeMap<ServerName, (String, Arc<Authority>)>,
    /// The authorities by credential key, for the store's change hints and
    /// the shared login callback.
    by_key: Arc<Mutex<HashMap<String, Arc<Authority>>>>,
    /// Logins finish through the cluster's public callback (any replica).
    shared_login: Option<SharedLogin>,
}

impl Credentials {
    /// Credentials kept in `store`, with the `oauth` settings of each backend.
    pub fn new(store: Option<Arc<dyn CredentialStore>>, settings: BTreeMap<String, OAuthSettings>) -> Self {
        let by_key = Arc::new(Mutex::new(HashMap::new()));
        Credentials { path: None, store, settings, authorities: BTreeMap::new(), by_key, shared_login: None }
    }

    /// Credentials in the user's state directory (or the shared store the
    /// file's `tether.cluster.store` names), with the settings of the
    /// configuration file at `path` (none without a file).
    pub fn from_config_file(path: Option<&Path>) -> Result<Self, String> {
        let settings = match path {
            Some(path) => settings_of(path)?,
            None => BTreeMap::new(),
        };
        // Replicas on several machines share logins through `tether.cluster.store`.
        let cluster = match path.filter(|p| p.exists()) {
            Some(path) => crate::cluster::ClusterSettings::from_file(path)?,
            None => None,
        };
        // Credentials go to the cluster's store only when it is Redis: on one
        // machine they stay in today's files.
        let shared =
            cluster.as_ref().filter(|c| c.store.is_some()).and_then(|c| Some((c.state.clone()?, c.keys.clone())));
        let (store, hints): (Option<Arc<dyn CredentialStore>>, _) = match shared {
            Some((state, keys)) => {
                let shared = SharedCredentials::new(state, keys);
                (Some(Arc::new(shared.clone())), Some(shared))
            }
            None => match FileStore::open_default() {
                Ok(store) => (Some(Arc::new(store)), None),
                Err(e) => {
                    tracing::warn!("no credential store ({e}): logins will not be kept");
                    (None, None)
                }
            },
        };
        let mut credentials = Credentials::new(store, settings);
        credentials.path = path.map(Path::to_path_buf);
        let callback = cluster.as_ref().and_then(|c| Some((c.login_redirect_uri.clone()?, c.keys.clone())));
        if let Some((redirect_uri, keys)) = callback {
            // The pending logins wait beside the credentials: in Redis, or in
            // files when the replicas share one machine.
            let store: Arc<dyn SharedStore> = match &hints {
                Some(shared) => shared.store().clone(),
                None => Arc::new(FileShared::open_default().map_err(|e| format!("login_redirect_uri: {e}"))?),
            };
            credentials.shared_login = Some(SharedLogin::new(redirect_uri, store, keys));
        }
        if let Some(shared) = hints {
            credentials.follow_hints(&shared);
        }
        Ok(credentials)
    }

    /// A token another replica stored is taken when the store's hint arrives
    /// (each authority still re-reads the store under the lease before
    /// refreshing: nothing depends on a hint).
    fn follow_hints(&self, shared: &SharedCredentials) {
        let by_key = Arc::downgrade(&self.by_key);
        shared.on_change(Arc::new(move |key: &str| {
            let authority = by_key.upgrade().and_then(|m| lock(&m).get(key).cloned());
            if let Some(authority) = authority {
                authority.hinted();
            }
        }));
    }

    /// No store and no settings: every step is answered that nothing can be kept
    /// (for embedders and tests that manage no credential).
    pub fn none() -> Self {
        Credentials::new(None, BTreeMap::new())
    }

    /// Matches the authorities to a reloaded `config`, re-reading the settings
    /// from the file first; on a settings error the old ones stay.
    pub fn reload(&mut self, config: &Config) {
        if let Some(path) = &self.path {
            match settings_of(path) {
                Ok(settings) => self.settings = settings,
                Err(e) => tracing::error!("OAuth settings not reloaded: {e}"),
            }
        }
        self.sync(config);
    }

    /// Matches the authorities to `config`: one per backend whose credential is
    /// managed; a backend whose URL or settings changed gets a fresh one.
    pub fn sync(&mut self, config: &Config) {
        let Some(store) = self.store.clone() else { return };
        let wanted: BTreeMap<&String, &String> = config
            .servers
            .iter()
            .filter(|(_, s)| s.manages_credential())
            .filter_map(|(name, s)| match &s.transport {
                Transport::Http { url, .. } | Transport::Sse { url, .. } => Some((name, url)),
                Transport::Stdio { .. } => None,
            })
            .collect();
        self.authorities.retain(|name, (url, _)| wanted.get(&name.to_string()).is_some_and(|u| *u == url));
        let mut by_key = lock(&self.by_key);
        by_key.clear();
        by_key.extend(self.authorities.values().map(|(_, a)| (a.key().to_owned(), a.clone())));
        for (name, url) in wanted {
            if self.authorities.contains_key(name.as_str()) {
                continue;
            }
            let settings = self.settings.get(name).cloned().unwrap_or_default();
            let mut authority = Authority::new(name.as_str().into(), url.clone(), settings, store.clone());
            if let Some(login) = &self.shared_login {
                authority = authority.with_shared_login(login.clone());
            }
            let authority = Arc::new(authority);
            by_key.insert(authority.key().to_owned(), authority.clone());
            self.authorities.insert(name.as_str().into(), (url.clone(), authority));
        }
    }

    /// What finishes logins whose callback lands on this replica, when logins
    /// go through the cluster's public callback (`login_redirect_uri`).
    pub fn login_desk(&self) -> Option<Arc<LoginDesk>> {
        let login = self.shared_login.clone()?;
        Some(Arc::new(LoginDesk::new(login, self.by_key.clone())))
    }

    /// How the shared credential store is doing (`None`: files on this machine, or none).
    pub fn store_health(&self) -> Option<crate::oauth::store::StoreHealth> {
        self.store.as_ref()?.health()
    }

    /// The authority of one backend, if tether manages its credential.
    pub fn authority(&self, server: &str) -> Option<&Arc<Authority>> {
        self.authorities.get(server).map(|(_, a)| a)
    }

    /// What a connection to `server` calls for its access token.
    pub fn bearer(&self, server: &str) -> Option<BearerSource> {
        Some(Arc::new(ManagedCredential(self.authority(server)?.clone())))
    }

    /// Carries out one step for `server`, reporting through `inputs`. Reading and
    /// forgetting are done at once (the connection that follows needs the token);
    /// the network steps run on a worker.
    pub fn execute(&self, server: ServerName, step: AuthStep, inputs: InputSink, spawn: &Spawner) {
        let report_to = server.clone();
        let report: Arc<dyn Fn(CredentialUpdate) + Send + Sync> = Arc::new(move |update| {
            let _ = inputs(Input::Credential { server: report_to.clone(), update });
        });
        let Some(authority) = self.authority(&server).cloned() else {
            // No store (no home directory): nothing is stored, and no login can be kept.
            match step {
                AuthStep::Discard => {}
                AuthStep::Load => report(CredentialUpdate::Missing),
                _ => report(CredentialUpdate::Failed {
                    reason: CredentialFailure::Rejected,
                    message: "no credential store: set TETHER_STATE_DIR or HOME".into(),
                }),
            }
            return;
        };
        authority.step_asked(&step);
        match step {
            AuthStep::Load | AuthStep::Discard => authority.execute(step, report),
            step => spawn(Box::new(move || authority.execute(step, report))),
        }
    }
}

fn settings_of(path: &Path) -> Result<BTreeMap<String, OAuthSettings>, String> {
    let sections = crate::config_file::oauth_sections(path).map_err(|e| e.to_string())?;
    sections
        .into_iter()
        .map(|(name, value)| {
            serde_json::from_value(value)
                .map(|s| (name.clone(), s))
                .map_err(|e| format!("{}: servers.{name}.oauth: {e}", path.display()))
        })
        .collect()
}

/// A backend's managed credential, as its connections put it on requests.
struct ManagedCredential(Arc<Authority>);

impl crate::http_backend::CredentialSource for ManagedCredential {
    fn authorize(&self, method: &str, url: &str) -> Option<(String, Option<String>)> {
        self.0.authorize(method, url)
    }

    fn token(&self) -> Option<String> {
        self.0.bearer()
    }

    fn nonce(&self, nonce: &str) -> bool {
        self.0.resource_nonce(nonce)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
