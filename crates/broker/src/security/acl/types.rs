//! Kafka's ACL vocabulary (KIP-11, KIP-290): resource types, pattern types, operations and
//! permissions with their wire codes, bindings (a resource pattern plus an access control
//! entry) and the filters DescribeAcls and DeleteAcls match with.

use serde::{Deserialize, Serialize};

/// The name of the one CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A LITERAL resource name matching every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";
/// An ACL host matching every host.
pub const WILDCARD_HOST: &str = "*";
/// An ACL principal matching every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Defines an enum of Kafka codes (`i8` on the wire) with Kafka's names.
macro_rules! kafka_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $code:expr, $text:expr;)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL_VALUES: &'static [$name] = &[$($name::$variant),*];

            /// The wire code.
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),* }
            }

            /// The value of a wire code; `None` for UNKNOWN (0) and codes Kafka does not define.
            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$variant),)* _ => None }
            }

            /// Kafka's name (`TOPIC`, `DESCRIBE_CONFIGS`, ...).
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            /// Kafka's names, case-insensitive, with or without underscores (`DescribeConfigs`).
            fn from_str(s: &str) -> Result<Self, String> {
                let want: String = s.chars().filter(|c| *c != '_' && *c != '-').collect();
                $name::ALL_VALUES
                    .iter()
                    .copied()
                    .find(|v| v.name().replace('_', "").eq_ignore_ascii_case(&want))
                    .ok_or_else(|| format!("unknown {} '{s}'", stringify!($name)))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_enum!(
    /// Kafka's `ResourceType`; ANY only in filters.
    ResourceType {
        Any = 1, "ANY";
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

kafka_enum!(
    /// Kafka's `PatternType`; ANY and MATCH only in filters.
    PatternType {
        Any = 1, "ANY";
        Match = 2, "MATCH";
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    /// Kafka's `AclOperation`; ANY only in filters.
    Operation {
        Any = 1, "ANY";
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
);

kafka_enum!(
    /// Kafka's `AclPermissionType`; ANY only in filters.
    Permission {
        Any = 1, "ANY";
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

impl ResourceType {
    /// The operations an ACL on this resource type can grant, as Kafka lists them
    /// (`AclEntry.supportedOperations`): the bits of the authorized-operations fields.
    pub fn supported_operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
            ResourceType::Any => &[],
        }
    }
}

impl Operation {
    /// The ALLOW operations that grant `self` (KIP-11's implication: READ, WRITE, DELETE and
    /// ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL implies everything).
    pub fn granted_by(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            Describe => &[Describe, Read, Write, Delete, Alter, All],
            DescribeConfigs => &[DescribeConfigs, AlterConfigs, All],
            Read => &[Read, All],
            Write => &[Write, All],
            Create => &[Create, All],
            Delete => &[Delete, All],
            Alter => &[Alter, All],
            ClusterAction => &[ClusterAction, All],
            AlterConfigs => &[AlterConfigs, All],
            IdempotentWrite => &[IdempotentWrite, All],
            CreateTokens => &[CreateTokens, All],
            DescribeTokens => &[DescribeTokens, All],
            All => &[All],
            Any => &[],
        }
    }
}

/// What an ACL applies to: a resource type and a name, literal (or `*`) or a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

/// Who may (or may not) do what from where.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AccessControlEntry {
    /// `User:<name>` or `User:*`.
    pub principal: String,
    /// An IP address or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

/// A concrete resource a request touches (what `authorize` checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource<'a> {
    pub resource_type: ResourceType,
    pub name: &'a str,
}

impl<'a> Resource<'a> {
    pub fn topic(name: &'a str) -> Self {
        Resource {
            resource_type: ResourceType::Topic,
            name,
        }
    }
    pub fn group(name: &'a str) -> Self {
        Resource {
            resource_type: ResourceType::Group,
            name,
        }
    }
    pub fn transactional_id(name: &'a str) -> Self {
        Resource {
            resource_type: ResourceType::TransactionalId,
            name,
        }
    }
    pub fn cluster() -> Resource<'static> {
        Resource {
            resource_type: ResourceType::Cluster,
            name: CLUSTER_NAME,
        }
    }
}

/// DescribeAcls' filter and each of DeleteAcls' (Kafka's `AclBindingFilter`): `None` and ANY
/// match everything; MATCH matches the patterns that would apply to the named resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    /// Matches every ACL.
    pub fn any() -> Self {
        AclFilter {
            resource_type: ResourceType::Any,
            name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        }
    }

    /// Kafka's `ResourcePatternFilter.matches`.
    pub fn matches_pattern(&self, p: &ResourcePattern) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != p.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != p.pattern_type
        {
            return false;
        }
        let Some(name) = &self.name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == p.pattern_type {
            return *name == p.name;
        }
        match p.pattern_type {
            PatternType::Literal => *name == p.name || p.name == WILDCARD_RESOURCE,
            PatternType::Prefixed => name.starts_with(&p.name),
            PatternType::Any | PatternType::Match => false,
        }
    }

    /// Kafka's `AccessControlEntryFilter.matches`.
    pub fn matches_entry(&self, e: &AccessControlEntry) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == e.principal)
            && self.host.as_ref().is_none_or(|h| *h == e.host)
            && (self.operation == Operation::Any || self.operation == e.operation)
            && (self.permission == Permission::Any || self.permission == e.permission)
    }

    pub fn matches(&self, b: &AclBinding) -> bool {
        self.matches_pattern(&b.pattern) && self.matches_entry(&b.entry)
    }
}

/// Kafka's `SecurityUtils.parseKafkaPrincipal`: `Type:name`, both parts non-empty.
pub fn valid_principal(s: &str) -> bool {
    s.split_once(':')
        .is_some_and(|(t, n)| !t.is_empty() && !n.is_empty())
}
