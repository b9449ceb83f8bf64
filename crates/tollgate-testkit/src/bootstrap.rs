//! The repository's example files (Envoy bootstraps in `examples/envoy/`, manifests in `deploy/`) read as JSON values, so that a test runs them as shipped with only its own ports put in.
//!
//! A bootstrap written back with [`serde_json::to_string`] is valid YAML, so
//! [`crate::envoy::Envoy::start`] takes it as it is.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A file of the repository, by its path from the workspace root (`examples/envoy/global.yaml`).
#[must_use]
pub fn repository_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

/// Every YAML document of the repository file `relative`, in order.
#[must_use]
pub fn yaml_documents(relative: &str) -> Vec<Value> {
    let path = repository_file(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|error| panic!("{} is not YAML: {error}", path.display()))
}

/// One YAML document given as text (a filter's fields in a test) as a JSON value.
#[must_use]
pub fn yaml_value(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|error| panic!("not YAML ({error}):\n{text}"))
}

/// The one YAML document of the repository file `relative` (an Envoy bootstrap).
#[must_use]
pub fn yaml_document(relative: &str) -> Value {
    let mut documents = yaml_documents(relative);
    assert_eq!(documents.len(), 1, "{relative}: one document expected");
    documents.remove(0)
}

/// The element of the array at `array` in `parent` whose `name` is `name`.
fn named<'a>(parent: &'a mut Value, array: &str, name: &str) -> &'a mut Value {
    parent[array]
        .as_array_mut()
        .unwrap_or_else(|| panic!("no `{array}` array"))
        .iter_mut()
        .find(|item| item["name"] == name)
        .unwrap_or_else(|| panic!("no `{name}` in `{array}`"))
}

/// Sets the port of a `socket_address`.
fn set_socket_port(address: &mut Value, port: u16) {
    let socket = &mut address["socket_address"];
    assert!(socket.is_object(), "not a socket address: {address}");
    socket["port_value"] = port.into();
}

/// An Envoy bootstrap as a JSON value, with methods that put a test's ports in.
#[derive(Clone, Debug)]
pub struct Bootstrap(pub Value);

impl Bootstrap {
    /// The bootstrap in the repository file `relative` (`examples/envoy/global.yaml`).
    #[must_use]
    pub fn example(relative: &str) -> Bootstrap {
        Bootstrap(yaml_document(relative))
    }

    /// Sets the admin listener's port.
    pub fn set_admin_port(&mut self, port: u16) -> &mut Self {
        set_socket_port(&mut self.0["admin"]["address"], port);
        self
    }

    /// The listener named `name`.
    pub fn listener(&mut self, name: &str) -> &mut Value {
        named(&mut self.0["static_resources"], "listeners", name)
    }

    /// Sets listener `name` to 127.0.0.1:`port`.
    pub fn set_listener(&mut self, name: &str, port: u16) -> &mut Self {
        let address = &mut self.listener(name)["address"];
        set_socket_port(address, port);
        address["socket_address"]["address"] = "127.0.0.1".into();
        self
    }

    /// Adds a copy of listener `from` named `name` on 127.0.0.1:`port` (its
    /// connection manager's `stat_prefix` is `name` too); the copy.
    pub fn copy_listener(&mut self, from: &str, name: &str, port: u16) -> &mut Value {
        let mut copy = self.listener(from).clone();
        copy["name"] = name.into();
        copy["address"]["socket_address"] =
            serde_json::json!({"address": "127.0.0.1", "port_value": port});
        let listeners = self.0["static_resources"]["listeners"]
            .as_array_mut()
            .expect("a listeners array");
        listeners.push(copy);
        self.connection_manager(name)["stat_prefix"] = name.into();
        self.listener(name)
    }

    /// Removes listener `name`.
    pub fn remove_listener(&mut self, name: &str) -> &mut Self {
        let listeners = self.0["static_resources"]["listeners"]
            .as_array_mut()
            .expect("a listeners array");
        listeners.retain(|listener| listener["name"] != name);
        self
    }

    /// The cluster named `name`.
    pub fn cluster(&mut self, name: &str) -> &mut Value {
        named(&mut self.0["static_resources"], "clusters", name)
    }

    /// Sets every endpoint of cluster `name` to `port`.
    pub fn set_cluster_port(&mut self, name: &str, port: u16) -> &mut Self {
        let endpoints = self.cluster(name)["load_assignment"]["endpoints"]
            .as_array_mut()
            .unwrap_or_else(|| panic!("cluster {name} has no endpoints"));
        for locality in endpoints {
            for endpoint in locality["lb_endpoints"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                set_socket_port(&mut endpoint["endpoint"]["address"], port);
            }
        }
        self
    }

    /// The HTTP connection manager of listener `listener` (its first filter chain's).
    pub fn connection_manager(&mut self, listener: &str) -> &mut Value {
        let chain = &mut self.listener(listener)["filter_chains"][0];
        &mut named(
            chain,
            "filters",
            "envoy.filters.network.http_connection_manager",
        )["typed_config"]
    }

    /// The `typed_config` of HTTP filter `filter` (`envoy.filters.http.ratelimit`) of listener `listener`.
    pub fn http_filter(&mut self, listener: &str, filter: &str) -> &mut Value {
        &mut named(self.connection_manager(listener), "http_filters", filter)["typed_config"]
    }

    /// The bootstrap as text for Envoy's `-c` (JSON, which is YAML).
    #[must_use]
    pub fn text(&self) -> String {
        self.0.to_string()
    }
}
