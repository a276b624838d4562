//! The two expiry emails' plain-text subject and body (behaviour §B28.10.2), rendered
//! from their payload: [`render`]. Every user-controlled value is made one line
//! (`notify::mail::one_line`) first.

use super::payload::{EmailNotification, ResourceType};
use crate::notify::mail::{self, one_line, Rendered};
use crate::notify::Instance;

/// The subject and body of `n` for a recipient greeted as `display_name`. Every
/// user-controlled value is made [`one_line`] first.
pub fn render(n: &EmailNotification, display_name: &str, instance: &Instance) -> Rendered {
    let display_name = mail::display_name(display_name);
    match n {
        EmailNotification::AccessTokenAboutToExpire {
            days_to_expire,
            token_names,
            ..
        } => {
            let mut body = format!(
                "Hi {display_name}!\n\n\
                 The following personal access tokens expire in {days_to_expire} days or less:\n\n"
            );
            for name in token_names {
                body.push_str(&format!("- {}\n", one_line(name)));
            }
            body.push_str(&format!(
                "\nYou can create a new token or extend these ones at {}/-/user_settings/personal_access_tokens\n",
                instance.base_url
            ));
            Rendered {
                subject: format!(
                    "Your personal access tokens will expire in {days_to_expire} days or less"
                ),
                body,
            }
        }
        EmailNotification::BotResourceAccessTokenAboutToExpire {
            days_to_expire,
            token_name,
            resource_type,
            resource_full_path,
            ..
        } => {
            let (token_name, resource_full_path) =
                (one_line(token_name), one_line(resource_full_path));
            let link = match resource_type {
                ResourceType::Project => {
                    format!(
                        "{}/{resource_full_path}/-/settings/access_tokens",
                        instance.base_url
                    )
                }
                ResourceType::Group => format!(
                    "{}/groups/{resource_full_path}/-/settings/access_tokens",
                    instance.base_url
                ),
            };
            Rendered {
                subject: format!(
                    "Your resource access tokens will expire in {days_to_expire} days or less"
                ),
                body: format!(
                    "Hi {display_name}!\n\n\
                     The access token '{token_name}' of the {} '{resource_full_path}' expires in {days_to_expire} days or less.\n\n\
                     You can create a new token at {link}\n",
                    resource_type.as_str()
                ),
            }
        }
    }
}
