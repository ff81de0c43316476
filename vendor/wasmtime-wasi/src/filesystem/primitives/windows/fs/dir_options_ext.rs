#[derive(Debug, Clone)]
pub(crate) struct DirOptionsExt {}

impl DirOptionsExt {
    pub(crate) const fn new() -> Self {
        Self {}
    }
}
