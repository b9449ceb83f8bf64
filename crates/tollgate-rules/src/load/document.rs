//! The walk over one limits file: its YAML, its top level, and the domain its descriptors join.

use std::path::Path;

use super::sections::FILE_SECTION;
use super::{Context, DomainUnderConstruction, Loader};
use crate::model::{DomainRules, Level};
use crate::tree::{Node, NodeValue, Position, parse_document};

impl Loader {
    /// Loads one file's domain and descriptors.
    pub(super) fn load_file(&mut self, file: &Path, text: &str) {
        let Some(document) = self.parse_root(file, text) else {
            return;
        };
        let Some(entries) = self.root_entries(file, &document) else {
            return;
        };
        let (domain, descriptors) = self.file_sections(file, entries);
        let Some((name, position)) = domain else {
            self.diagnostics.error(
                file,
                document.position,
                "missing `domain`: every limits file names its domain",
            );
            self.check_descriptors_only(file, "", descriptors);
            return;
        };
        if name.is_empty() {
            self.check_descriptors_only(file, "", descriptors);
            return;
        }
        let Some(mut target) = self.domain_to_extend(file, &name, position) else {
            self.check_descriptors_only(file, &name, descriptors);
            return;
        };
        if let Some(list) = descriptors {
            let context = Context {
                file,
                domain: &name,
            };
            let mut root = std::mem::take(&mut target.rules.root);
            self.load_level(&context, &mut target.rules, &mut root, &[], &[], list);
            target.rules.root = root;
        }
        self.domains.insert(name, target);
    }

    /// The file's first YAML document (warning about any others), or `None` after reporting invalid YAML.
    fn parse_root(&mut self, file: &Path, text: &str) -> Option<Node> {
        match parse_document(text, self.options.yaml) {
            Ok(document) => {
                for position in &document.ignored_documents {
                    self.diagnostics.warning(
                        file,
                        *position,
                        "only the first YAML document of a file is read (as upstream); this one is ignored",
                    );
                }
                Some(document.root)
            }
            Err(error) => {
                self.diagnostics.error(file, error.position, error.message);
                None
            }
        }
    }

    /// The top-level mapping's entries (none for an empty file), or `None` after reporting another kind.
    fn root_entries<'n>(&mut self, file: &Path, root: &'n Node) -> Option<&'n [(Node, Node)]> {
        match &root.value {
            NodeValue::Map(entries) => Some(entries.as_slice()),
            NodeValue::Null => Some(&[]),
            other => {
                self.diagnostics.error(
                    file,
                    root.position,
                    format!(
                        "a limits file must be a mapping with `domain` and `descriptors`, found {}",
                        other.kind_name()
                    ),
                );
                None
            }
        }
    }

    /// The file's `domain` (name and position) and its `descriptors` list.
    fn file_sections<'n>(
        &mut self,
        file: &Path,
        entries: &'n [(Node, Node)],
    ) -> (Option<(String, Position)>, Option<&'n Node>) {
        let mut domain = None;
        let mut descriptors = None;
        for (key, value) in self.checked_entries(file, entries, FILE_SECTION) {
            match key {
                "domain" => {
                    let is_text = matches!(value.value, NodeValue::Null | NodeValue::Text(_));
                    let name = self.text_value(file, value, "domain").unwrap_or_default();
                    if name.is_empty() && is_text {
                        self.diagnostics
                            .error(file, value.position, "`domain` must not be empty");
                    }
                    domain = Some((name, value.position));
                }
                "descriptors" => descriptors = Some(value),
                _ => {}
            }
        }
        (domain, descriptors)
    }

    /// The domain `name` that this file's descriptors join: a new one, or
    /// (when merging) the one loaded before; `None` after reporting a duplicate.
    fn domain_to_extend(
        &mut self,
        file: &Path,
        name: &str,
        position: Position,
    ) -> Option<DomainUnderConstruction> {
        match self.domains.remove(name) {
            Some(existing) if self.options.merge_domains => Some(existing),
            Some(existing) => {
                self.diagnostics.error(
                    file,
                    position,
                    format!(
                        "duplicate domain `{name}`: already defined at {}:{}; use one file per domain or merge_domains",
                        existing.file.display(),
                        existing.position
                    ),
                );
                self.domains.insert(name.to_owned(), existing);
                None
            }
            None => Some(DomainUnderConstruction {
                rules: DomainRules::default(),
                file: file.to_path_buf(),
                position,
            }),
        }
    }

    /// Checks descriptors that will not be loaded (their file's domain is
    /// missing or taken), so that every error in them is still reported.
    fn check_descriptors_only(&mut self, file: &Path, domain: &str, descriptors: Option<&Node>) {
        let Some(list) = descriptors else { return };
        let pending = self.replaces.len();
        let context = Context { file, domain };
        let mut scratch = DomainRules::default();
        let mut root = Level::default();
        self.load_level(&context, &mut scratch, &mut root, &[], &[], list);
        // Names in `replaces` cannot be checked against a domain that is not loaded.
        self.replaces.truncate(pending);
    }
}
