//! Sample prompts for a plan-generation task (what a front door shows
//! before one is written): each one the length and the kind of detail a
//! task needs (background, constraints,
//! budget, timeline, place, success criteria, what is out of bounds), for a
//! different kind of project.

/// One sample prompt.
#[derive(Debug)]
pub struct Example {
    /// A short name.
    pub title: &'static str,
    /// What kind of project it is.
    pub tags: &'static [&'static str],
    /// The prompt.
    pub prompt: &'static str,
}

/// The samples, in the order they are given.
pub const EXAMPLES: [Example; 3] = [
    Example {
        title: "A neighbourhood bakery and café",
        tags: &["small business", "retail", "hiring", "France"],
        prompt: "Plan the opening of a neighbourhood bakery with a small café corner (twelve seats) in the Croix-Rousse district of Lyon, France, \
opening within nine months on a total budget of EUR 180,000. The owner is a trained baker with eleven years in hotel kitchens and no experience \
running a business; she will work full time in the shop and hire two staff: a sales assistant and an apprentice baker under the French \
apprenticeship scheme. Funding is EUR 60,000 of savings and a bank loan of up to EUR 120,000 that the bank will only grant on a business plan \
with a monthly cash-flow forecast for the first two years.\n\n\
Constraints: the premises must be rented, not bought, and within a ten-minute walk of the Croix-Rousse metro station; the lease must allow \
a wood-fired or deck oven and the extraction it needs. Opening hours must respect French labour law for the staff (35-hour week, Sunday \
rules for food retail). Flour comes from a local mill if at all possible: the owner wants 80% of it from within 150 km. The shop must meet \
the hygiene rules for food businesses from the first day, and the café corner needs the right licence for serving hot drinks.\n\n\
Success means: break-even on a monthly basis by month 18; a daily average of 250 customers by the end of the first year; two staff retained \
for at least a year; and a rating of 4.5 or more on the usual review sites. The plan should say what to do first, what can wait until \
after opening, which permits and inspections are on the critical path, how long the fit-out and the oven installation usually take in \
Lyon, and what the cash position looks like month by month.\n\n\
Known risks: the fit-out overrunning, a late oven delivery, the bank loan taking longer than expected, and the rise in butter and energy \
prices. Out of scope: delivery apps, a second shop, a franchise, wholesale to restaurants, and any online shop in the first year. \
The owner would rather open two months late than open with debts she cannot service.",
    },
    Example {
        title: "Moving a monolith to managed services",
        tags: &["software", "migration", "cloud", "e-commerce"],
        prompt: "Plan the migration of a 12-year-old monolithic PHP e-commerce site to a containerised service architecture on a managed cloud, \
within twelve months, with a team of six engineers (two senior, three mid-level, one site reliability engineer) and a budget of \
USD 900,000 including cloud spend during the transition. The site sells outdoor equipment in five European countries, has about \
400,000 visitors a month with peaks of five times that in November, runs on MySQL 5.7 with a 180 GB database, and stores 30 GB of \
product images on the web servers' disks. Payments go through an external provider that stays; the pricing engine is a 40,000-line \
module nobody fully understands, and it must not be rewritten in year one.\n\n\
Constraints: zero data loss; under one hour of total downtime over the whole migration, none of it in November or December; no drop in \
the conversion rate (2.1% today) measured over any four-week window; the customer database stays in the EU. The team keeps shipping \
features for the business during the migration, at no less than half its current pace. The company has no Kubernetes experience yet; \
training is allowed in the budget, but the plan must not depend on hiring.\n\n\
Success means: the checkout, catalogue and account pages served by the new architecture; the old servers switched off; page load times \
at the 95th percentile no worse than today; deployments at least daily instead of monthly; and a run cost no higher than today's hosting \
plus 15%. The plan should order the work (what to carve out first and why), say how traffic moves from old to new (feature flags, \
a strangler proxy, a parallel run), how the database moves without a long freeze, which risks could stop the project and how each is \
watched, and what the team learns when.\n\n\
Out of scope: replacing the payment provider, a redesign of the shop's look, a mobile app, and moving the warehouse system, which \
talks to the shop through a nightly file export that must keep working unchanged.",
    },
    Example {
        title: "An open-source developer conference",
        tags: &["event", "community", "sponsorship", "Kenya"],
        prompt: "Plan a two-day open-source developer conference for 600 people in Nairobi, Kenya, ten months from now, on a budget of \
USD 250,000 raised from sponsors and ticket sales; nothing is raised yet. The organisers are a volunteer committee of eight from three \
local open-source communities, with two paid coordinators from month three; none of them has run an event over 150 people. \
The programme has two tracks of talks, a hands-on hack day on the second afternoon, and workshops for first-time contributors. \
Talks are streamed live and recorded, with captions.\n\n\
Constraints: the venue must be reachable by public transport from the city centre, accessible for wheelchair users, and have reliable \
power and internet for 600 laptops (with a backup link). Tickets must stay affordable for students, with at least 150 free places. \
A diversity scholarship covers travel and accommodation for 60 attendees from across East Africa; its selection must be fair and \
published. Single-use plastics are banned at the event, and so are speaker panels without women. A code of conduct, with trained people \
to handle reports, applies from the call for papers onwards.\n\n\
Success means: 600 attendees over the two days; at least 40% of speakers giving their first conference talk; break-even or better; \
a post-event survey score above 4 out of 5; every talk online within two weeks; and ten sponsors, none of them paying for a keynote slot. \
The plan should give the timeline backwards from the event date (venue, call for papers, speaker selection, sponsorship, ticketing, \
visas for foreign speakers, catering, stream), the budget with what is fixed and what scales with attendance, who in the committee \
owns what, and what to do if sponsorship comes in below target by month five.\n\n\
Out of scope: a third day, a paid conference app, an after-party with an open bar, and hosting the event in a hotel.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_is_300_to_800_words_and_tagged() {
        for example in &EXAMPLES {
            let words = example.prompt.split_whitespace().count();
            assert!(
                (300..=800).contains(&words),
                "{}: {words} words",
                example.title
            );
            assert!(!example.tags.is_empty(), "{}", example.title);
        }
    }
}
