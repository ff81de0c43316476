//! The default plugin set, built from `plugins/` for `wasm32-wasip2` by `build.rs` and
//! embedded in the binary so `dsh` works with no configuration. Which plugins those are
//! is named once, in [`set`].

pub mod set;

pub use set::{EmbeddedPlugin, Kind, EMBEDDED};

/// One embedded plugin's component, as `build.rs` embedded it.
#[derive(Debug)]
pub struct EmbeddedComponent {
    pub name: &'static str,
    /// The component.
    pub bytes: &'static [u8],
    /// Its SHA-256, hex, computed when it was embedded.
    pub digest: &'static str,
    /// Its code, compiled when dsh was built by an engine with the runtime's compile
    /// settings for the building machine (`None` in a cross build). wasmtime refuses it
    /// on a machine it does not fit (another CPU's features), and the component is then
    /// compiled as any other.
    pub precompiled: Option<&'static [u8]>,
}

impl EmbeddedComponent {
    /// Its bytes, digest and precompiled code, for loading.
    pub fn component(&self) -> crate::engine::plugin::ComponentBytes {
        crate::engine::plugin::ComponentBytes::embedded(self)
    }
}

// `PLUGINS: &[EmbeddedComponent]`: each of `EMBEDDED`, in order.
include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// The embedded plugin `name`'s component, if there is one.
pub fn component(name: &str) -> Option<crate::engine::plugin::ComponentBytes> {
    PLUGINS
        .iter()
        .find(|embedded| embedded.name == name)
        .map(EmbeddedComponent::component)
}

/// Whether the embedded plugin `name` is loaded under `config`: every tool, and the
/// stages (guards, middleware, filters, observers) `[pipeline]` names.
pub fn wanted(name: &str, config: &crate::config::Config) -> bool {
    match set::find(name) {
        Some(plugin) if plugin.kind == Kind::Tool => true,
        Some(_) => config.pipeline.names(name),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_plugin_has_its_component_in_the_binary() {
        let names: Vec<&str> = PLUGINS.iter().map(|plugin| plugin.name).collect();
        let listed: Vec<&str> = EMBEDDED.iter().map(|plugin| plugin.name).collect();
        assert_eq!(names, listed);
        for EmbeddedComponent {
            name,
            bytes,
            digest,
            precompiled,
        } in PLUGINS
        {
            // A component's preamble: `\0asm`, then a version with the component layer.
            assert_eq!(&bytes[..4], b"\0asm", "{name}");
            assert_eq!(&bytes[6..8], &[0x01, 0x00], "{name} is not a component");
            // The digest computed when it was embedded is the bytes' own.
            assert_eq!(*digest, crate::engine::plugin::digest(bytes), "{name}");
            // Built for this machine (the tests never cross-build): precompiled, as ELF.
            let code = precompiled.unwrap_or_else(|| panic!("{name} has no precompiled code"));
            assert_eq!(&code[..4], b"\x7fELF", "{name}");
        }
    }

    #[test]
    fn tools_are_always_wanted_and_stages_only_when_the_pipeline_names_them() {
        let mut config = crate::config::Config::default();
        assert!(wanted("bash", &config));
        assert!(!wanted("deny_destructive", &config));
        assert!(!wanted("echo", &config));
        config.pipeline.guards.push("deny_destructive".into());
        config.pipeline.filters.push("redact_secrets".into());
        assert!(wanted("deny_destructive", &config));
        assert!(wanted("redact_secrets", &config));
        assert!(!wanted("workspace_only", &config));
    }
}
