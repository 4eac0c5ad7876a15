//! Consumer lag, computed in one place for the JSON API, the UI and `/metrics`.

use crate::facade::GroupOffset;

/// Messages the group still has to consume on one partition: high watermark minus the committed
/// offset, never negative. None when the group has no committed offset (Kafka's tools print
/// "-") or the partition no longer exists.
pub fn partition_lag(offset: &GroupOffset) -> Option<i64> {
    if offset.committed_offset < 0 {
        return None;
    }
    offset
        .high_watermark
        .map(|hw| (hw - offset.committed_offset).max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(committed: i64, hw: Option<i64>) -> GroupOffset {
        GroupOffset {
            topic: "t".into(),
            partition: 0,
            committed_offset: committed,
            metadata: String::new(),
            high_watermark: hw,
        }
    }

    #[test]
    fn lag_rules() {
        assert_eq!(partition_lag(&offset(10, Some(25))), Some(15));
        assert_eq!(partition_lag(&offset(30, Some(25))), Some(0));
        assert_eq!(partition_lag(&offset(-1, Some(25))), None);
        assert_eq!(partition_lag(&offset(3, None)), None);
    }
}
