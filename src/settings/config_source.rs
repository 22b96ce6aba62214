//! Settings of where the descriptor configuration comes from: the runtime directory or an xDS
//! management server.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::parse::{parse_bool, parse_duration, parse_f64, parse_int, parse_map, ParseError};
use super::reader::Reader;
use super::vars::*;
use super::Redacted;

/// Where descriptor configuration comes from and how it is loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigProviderSettings {
    /// `CONFIG_TYPE`: which provider delivers the configuration.
    pub config_type: ConfigType,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`: open the listeners without waiting for the
    /// first configuration.
    pub force_start_without_initial_config: bool,
    /// `MERGE_DOMAIN_CONFIG`: allow several files to define one domain.
    pub merge_domain_config: bool,
    /// The FILE provider's runtime directory.
    pub runtime: RuntimeSettings,
    /// The GRPC_XDS_SOTW provider.
    pub xds: XdsSettings,
}

/// The FILE provider's runtime directory: files are read from
/// `root/subdirectory/app_directory`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// `RUNTIME_ROOT`: provider root (often a symlink swapped on deploy).
    pub root: String,
    /// `RUNTIME_SUBDIRECTORY`: subdirectory under the root; may be empty.
    pub subdirectory: String,
    /// `RUNTIME_APPDIRECTORY`: directory holding the config files (with `watch_root`, also
    /// the prefix of the runtime keys).
    pub app_directory: String,
    /// `RUNTIME_IGNOREDOTFILES`: skip dot files and dot directories.
    pub ignore_dot_files: bool,
    /// `RUNTIME_WATCH_ROOT`: true reloads on a symlink swap of the root; false watches the
    /// application directory.
    pub watch_root: bool,
}

/// The xDS state-of-the-world configuration client.
#[derive(Clone, PartialEq)]
pub struct XdsSettings {
    /// `CONFIG_GRPC_XDS_NODE_ID`: node id sent to the management server.
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA`: node metadata as written (`k=v,k2=v2`), unparsed.
    pub node_metadata: String,
    /// `CONFIG_GRPC_XDS_SERVER_URL`: management server gRPC target.
    pub server_url: String,
    /// `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`: stream retry interval.
    pub connect_retry_interval: Duration,
    /// `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`: extra gRPC metadata on the stream. Values
    /// may be credentials, so `Debug` shows only the keys.
    pub additional_headers: BTreeMap<String, String>,
    /// `CONFIG_GRPC_XDS_SERVER_USE_TLS`: TLS to the management server.
    pub use_tls: bool,
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`: client certificate file.
    pub client_tls_cert: String,
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_KEY`: client key file.
    pub client_tls_key: String,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`: CA file added to the system roots.
    pub server_tls_ca_cert: String,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_SAN`: expected server name; empty means the URL's host.
    pub server_tls_san: String,
    /// `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`: reconnect back-off minimum.
    pub backoff_initial_interval: Duration,
    /// `XDS_CLIENT_BACKOFF_MAX_INTERVAL`: reconnect back-off maximum.
    pub backoff_max_interval: Duration,
    /// `XDS_CLIENT_BACKOFF_RANDOM_FACTOR`: the original uses it as the back-off
    /// multiplier, whatever its name says.
    pub backoff_random_factor: f64,
    /// `XDS_CLIENT_BACKOFF_JITTER`: jitter on the back-off.
    pub backoff_jitter: bool,
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`: largest message received; 0 means the gRPC
    /// default (4 MiB).
    pub max_msg_size_in_bytes: i64,
}

impl fmt::Debug for XdsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: BTreeMap<&str, Redacted<'_>> = self
            .additional_headers
            .iter()
            .map(|(k, v)| (k.as_str(), Redacted(v)))
            .collect();
        f.debug_struct("XdsSettings")
            .field("node_id", &self.node_id)
            .field("node_metadata", &self.node_metadata)
            .field("server_url", &self.server_url)
            .field("connect_retry_interval", &self.connect_retry_interval)
            .field("additional_headers", &headers)
            .field("use_tls", &self.use_tls)
            .field("client_tls_cert", &self.client_tls_cert)
            .field("client_tls_key", &self.client_tls_key)
            .field("server_tls_ca_cert", &self.server_tls_ca_cert)
            .field("server_tls_san", &self.server_tls_san)
            .field("backoff_initial_interval", &self.backoff_initial_interval)
            .field("backoff_max_interval", &self.backoff_max_interval)
            .field("backoff_random_factor", &self.backoff_random_factor)
            .field("backoff_jitter", &self.backoff_jitter)
            .field("max_msg_size_in_bytes", &self.max_msg_size_in_bytes)
            .finish()
    }
}

/// `CONFIG_TYPE`: exactly `FILE` or `GRPC_XDS_SOTW` (case-sensitive, as the original).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfigType {
    /// `FILE`: the runtime directory.
    #[default]
    File,
    /// `GRPC_XDS_SOTW`: an xDS management server.
    GrpcXdsSotw,
}

impl FromStr for ConfigType {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "FILE" => Ok(Self::File),
            "GRPC_XDS_SOTW" => Ok(Self::GrpcXdsSotw),
            _ => Err(ParseError::OneOf {
                expected: "FILE, GRPC_XDS_SOTW",
            }),
        }
    }
}

impl ConfigProviderSettings {
    pub(super) fn read(r: &mut Reader<'_>) -> ConfigProviderSettings {
        ConfigProviderSettings {
            config_type: r.get(ENV_CONFIG_TYPE, str::parse),
            force_start_without_initial_config: r
                .get(ENV_FORCE_START_WITHOUT_INITIAL_CONFIG, parse_bool),
            merge_domain_config: r.get(ENV_MERGE_DOMAIN_CONFIG, parse_bool),
            runtime: RuntimeSettings {
                root: r.string(ENV_RUNTIME_ROOT),
                subdirectory: r.string(ENV_RUNTIME_SUBDIRECTORY),
                app_directory: r.string(ENV_RUNTIME_APPDIRECTORY),
                ignore_dot_files: r.get(ENV_RUNTIME_IGNOREDOTFILES, parse_bool),
                watch_root: r.get(ENV_RUNTIME_WATCH_ROOT, parse_bool),
            },
            xds: XdsSettings {
                node_id: r.string(ENV_CONFIG_GRPC_XDS_NODE_ID),
                node_metadata: r.string(ENV_CONFIG_GRPC_XDS_NODE_METADATA),
                server_url: r.string(ENV_CONFIG_GRPC_XDS_SERVER_URL),
                connect_retry_interval: r.get(
                    ENV_CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL,
                    parse_duration,
                ),
                additional_headers: r.get(ENV_CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, parse_map),
                use_tls: r.get(ENV_CONFIG_GRPC_XDS_SERVER_USE_TLS, parse_bool),
                client_tls_cert: r.string(ENV_CONFIG_GRPC_XDS_CLIENT_TLS_CERT),
                client_tls_key: r.string(ENV_CONFIG_GRPC_XDS_CLIENT_TLS_KEY),
                server_tls_ca_cert: r.string(ENV_CONFIG_GRPC_XDS_SERVER_TLS_CACERT),
                server_tls_san: r.string(ENV_CONFIG_GRPC_XDS_SERVER_TLS_SAN),
                backoff_initial_interval: r
                    .get(ENV_XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, parse_duration),
                backoff_max_interval: r.get(ENV_XDS_CLIENT_BACKOFF_MAX_INTERVAL, parse_duration),
                backoff_random_factor: r.get(ENV_XDS_CLIENT_BACKOFF_RANDOM_FACTOR, parse_f64),
                backoff_jitter: r.get(ENV_XDS_CLIENT_BACKOFF_JITTER, parse_bool),
                max_msg_size_in_bytes: r.get(ENV_XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES, parse_int),
            },
        }
    }
}
