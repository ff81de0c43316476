//! What the capabilities show their owners as resources, whatever protocol reaches them:
//! each kind a capability offers ([`ResourceSource`], from
//! [`Capability::resources`](super::Capability::resources)) names its URIs
//! (`SCHEME://ID/PART`), lists an owner's, and reads one of them as text. The MCP front end
//! serves them (`resources/list`, `read`, `subscribe`, templates and completion) knowing
//! no capability; the changes come through [`super::resource_changes`].

use std::future::Future;
use std::pin::Pin;

use crate::error::ToolError;

/// One kind of resource: its URIs are `SCHEME://ID/PART`.
#[derive(Debug, Clone)]
pub struct ResourceKind {
    pub scheme: &'static str,
    pub part: &'static str,
    /// The template's name and title (`terminal screen`, `Terminal screen`).
    pub name: &'static str,
    pub title: &'static str,
    /// What the template says of every resource of the kind.
    pub description: String,
}

impl ResourceKind {
    /// The URI of resource `id`.
    pub fn uri(&self, id: &str) -> String {
        format!("{}://{id}/{}", self.scheme, self.part)
    }

    /// The URI template (`SCHEME://{id}/PART`).
    pub fn template(&self) -> String {
        self.uri("{id}")
    }

    /// The id `uri` names, if it is of this kind and the id is one the host could have
    /// made (`term-1`, `bash-3`: nothing that could be a path).
    pub fn id_of<'a>(&self, uri: &'a str) -> Option<&'a str> {
        let id = uri
            .strip_prefix(self.scheme)?
            .strip_prefix("://")?
            .strip_suffix(self.part)?
            .strip_suffix('/')?;
        let valid = !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        valid.then_some(id)
    }
}

/// One resource of an owner, as it is listed.
#[derive(Debug, Clone)]
pub struct OwnedResource {
    pub id: String,
    pub name: String,
    pub title: String,
    pub description: String,
}

/// A boxed future of a resource's text.
pub type ReadFuture<'a> = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send + 'a>>;

/// A kind of resource a capability serves.
pub trait ResourceSource: Send + Sync + std::fmt::Debug {
    fn kind(&self) -> &ResourceKind;
    /// The owner's resources of this kind, oldest first.
    fn list(&self, owner: &str) -> Vec<OwnedResource>;
    /// The text of the owner's resource `id` as it is now; `NOT_FOUND` for one that is
    /// not the owner's (another owner's, one that never existed, one retired).
    fn read<'a>(&'a self, owner: &'a str, id: &'a str) -> ReadFuture<'a>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_reads_back_its_own_uris_and_nothing_else() {
        let screen = ResourceKind {
            scheme: "terminal",
            part: "screen",
            name: "terminal screen",
            title: "Terminal screen",
            description: String::new(),
        };
        assert_eq!(screen.uri("term-1"), "terminal://term-1/screen");
        assert_eq!(screen.template(), "terminal://{id}/screen");
        assert_eq!(screen.id_of("terminal://term-1/screen"), Some("term-1"));
        for uri in [
            "terminal://term-1/plain",
            "terminal:///screen",
            "terminal://../x/screen",
            "terminal://a/b/screen",
            "terminal://term-1/screen/",
            "terminal:/term-1/screen",
            "terminalx://term-1/screen",
            "job://bash-3/output",
            "file:///etc/passwd",
            "",
        ] {
            assert_eq!(screen.id_of(uri), None, "{uri}");
        }
    }
}
